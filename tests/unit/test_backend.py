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
        if path.name in ("backend.py", "_hooked.py", "_bridge.py", "loading.py"):
            continue
        names = [n for n in _transformer_lens_imports(path)
                 if not (n.startswith("transformer_lens:") and n.split(":")[1] in TOP_LEVEL_ALLOWED)]
        assert not names, f"{path.name} imports {names}; take them from circuits.models.backend"


def _top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def test_both_backends_implement_the_whole_contract():
    """Every name the seam exports (besides its own version check) is defined by both implementations, so code
    written on one TransformerLens line finds the same names on the other."""
    own = _top_level_names(PACKAGE / "models" / "backend.py") - _top_level_names(PACKAGE / "models" / "_hooked.py")
    for impl in ("_hooked.py", "_bridge.py"):
        missing = set(backend.__all__) - own - _top_level_names(PACKAGE / "models" / impl)
        assert not missing, f"{impl} lacks {sorted(missing)}"


def test_version_check_names_what_is_supported():
    assert backend.check_version("3.9.0") == "hooked"
    assert backend.check_version("4.3.0") == "bridge" and backend.check_version("4.7.1") == "bridge"
    for bad in ("3.8.1", "4.0.0", "4.2.0", "5.0.0"):
        try:
            backend.check_version(bad)
        except backend.UnsupportedTransformerLens as err:
            assert bad in str(err) and "3.9" in str(err) and "4.3" in str(err) and "\n" not in str(err)
        else:
            raise AssertionError(f"{bad} accepted")


def test_seam_names_are_transformer_lens_own():
    if backend.NAME == "bridge":
        from transformer_lens.model_bridge import TransformerBridge
        from transformer_lens.utilities import get_act_name

        assert issubclass(backend.Model, TransformerBridge) or backend.Model is TransformerBridge
    else:
        from transformer_lens import HookedTransformer
        from transformer_lens.utils import get_act_name

        assert backend.Model is HookedTransformer
    for site, layer in (("z", 3), ("mlp_out", 0), ("resid_pre", 5), ("post", 1), ("k", 2)):
        assert backend.act_name(site, layer) == get_act_name(site, layer)
    assert backend.act_name("z", 3) == "blocks.3.attn.hook_z"
    for name in backend.__all__:
        assert hasattr(backend, name), name
