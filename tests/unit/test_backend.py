"""The model seam: every TransformerLens internal the package uses outside its model code comes from
circuits.models.backend (what a second backend, TransformerLens 4's TransformerBridge, implements)."""

import ast
from pathlib import Path

import circuits
from circuits.models import backend

PACKAGE = Path(circuits.__file__).parent
# Outside circuits/models/, a module may name the model class and the cache class for annotations; nothing more.
TOP_LEVEL_ALLOWED = {"HookedTransformer", "ActivationCache"}


def _transformer_lens_imports(path: Path) -> list[str]:
    """Every ``transformer_lens`` import in a module, as ``module:name`` (``module`` for ``import x``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "transformer_lens"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformer_lens":
            found += [f"{node.module}:{a.name}" for a in node.names]
    return found


def test_only_the_models_package_imports_transformer_lens_internals():
    bad = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "models":
            continue
        names = [n for n in _transformer_lens_imports(path)
                 if not (n.startswith("transformer_lens:") and n.split(":")[1] in TOP_LEVEL_ALLOWED)]
        if names:
            bad[str(rel)] = names
    assert not bad, f"import these through circuits.models.backend instead: {bad}"


def test_the_check_sees_every_kind_of_import(tmp_path):
    """The scan above finds ``import x.y``, ``from x.y import z`` and imports inside functions."""
    f = tmp_path / "m.py"
    f.write_text("import transformer_lens.utils\ndef g():\n    from transformer_lens.utils import get_act_name\n"
                 "from transformer_lens import HookedTransformer\n")
    assert sorted(_transformer_lens_imports(f)) == ["transformer_lens.utils", "transformer_lens.utils:get_act_name",
                                                   "transformer_lens:HookedTransformer"]


def test_within_models_only_the_seam_and_loading_import_internals():
    """Inside circuits/models/, the engines' internals come from backend.py; loading.py keeps the loading ones."""
    for path in sorted((PACKAGE / "models").glob("*.py")):
        if path.name in ("backend.py", "loading.py"):
            continue
        names = [n for n in _transformer_lens_imports(path)
                 if not (n.startswith("transformer_lens:") and n.split(":")[1] in TOP_LEVEL_ALLOWED)]
        assert not names, f"{path.name} imports {names}; take them from circuits.models.backend"


def test_seam_names_are_transformer_lens_own():
    from transformer_lens import HookedTransformer
    from transformer_lens.utils import get_act_name

    assert backend.Model is HookedTransformer
    for site, layer in (("z", 3), ("mlp_out", 0), ("resid_pre", 5), ("post", 1), ("k", 2)):
        assert backend.act_name(site, layer) == get_act_name(site, layer)
    assert backend.act_name("z", 3) == "blocks.3.attn.hook_z"
    for name in backend.__all__:
        assert hasattr(backend, name), name
