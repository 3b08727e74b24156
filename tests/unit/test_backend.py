"""The model seam: every TransformerLens internal the package uses outside its model code comes from
circuits.models.backend, whose Backend contract both implementations (TransformerLens 3.9's HookedTransformer,
TransformerLens 4's TransformerBridge) define whole; the model carries its backend, and no module outside
circuits/models/ branches on which one it is."""

import ast
import copy
import pickle
import re
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
    """Inside circuits/models/, the engines' internals come from backend.py; loading.py keeps the loading ones and
    attention.py TransformerLens 3's attention class (whose forward it replaces by a fused one)."""
    for path in sorted((PACKAGE / "models").glob("*.py")):
        if path.name in ("backend.py", "_hooked.py", "_bridge.py", "loading.py", "attention.py"):
            continue
        names = [n for n in _transformer_lens_imports(path)
                 if not (n.startswith("transformer_lens:") and n.split(":")[1] in TOP_LEVEL_ALLOWED)]
        assert not names, f"{path.name} imports {names}; take them from circuits.models.backend"


CONTRACT = set(backend.Backend.__abstractmethods__) | {"name", "model_class"}


def _module_functions(path: Path) -> set[str]:
    """The names a module defines at its top level (functions, classes, assignments)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def test_both_backends_implement_the_whole_contract():
    """Both implementation modules define a function for every method of :class:`Backend` (read from their source,
    so the check runs on either TransformerLens line), and become their backend by
    :func:`~circuits.models.backend.implementation`; the installed one instantiates (no abstract method left)."""
    assert len(CONTRACT) > 30
    for impl in ("_hooked.py", "_bridge.py"):
        source = PACKAGE / "models" / impl
        missing = (CONTRACT - {"name", "model_class"}) - _module_functions(source)
        assert not missing, f"{impl} lacks {sorted(missing)}"
        assert "BACKEND = implementation(" in source.read_text(), impl
    b = backend.installed()
    assert isinstance(b, backend.Backend) and b.name == backend.NAME and not type(b).__abstractmethods__


def test_a_backend_missing_a_method_is_one_line():
    import pytest

    with pytest.raises(TypeError, match="lacks the contract's .*final_residual"):
        backend.implementation("partial", object, {"act_name": lambda *a: None})


def test_every_capability_is_a_function_of_the_model_too():
    """backend.f(model, ...) is backend_of(model).f(model, ...) for each method (the three without a model read the
    installed line)."""
    for name in backend.Backend.__abstractmethods__:
        if name == "reference_weights":  # export has no TransformerLens model: backend.installed().reference_weights
            continue
        assert callable(getattr(backend, name, None)), name
        assert name in backend.__all__, name


def test_the_model_carries_its_backend(tiny_llama):
    """load_model attaches the installed line's backend; a copy carries the same one; an object that wraps a Hugging
    Face model is a Bridge's; anything else built directly gets the installed line's."""
    assert backend.backend_of(tiny_llama) is backend.installed()
    assert vars(tiny_llama)[backend.ATTRIBUTE] is backend.installed()
    assert copy.deepcopy(backend.installed()) is backend.installed()
    assert pickle.loads(pickle.dumps(backend.installed())) is backend.installed()

    class Wrapped:
        original_model = adapter = None

    assert backend.backend_of(Wrapped()).name == "bridge"
    assert backend.backend_of(object()) is backend.installed()
    other = Wrapped()
    assert backend.backend_of(backend.attach(other, backend.installed())) is backend.installed()


# Lines outside circuits/models/ that branch on a backend or name TransformerLens 3 internals: none (an engine asks the
# model's backend for a capability). KNOWN would excuse a file (the test fails while an entry has nothing left to
# excuse, so the list cannot go stale).
BACKEND_NAMES = re.compile(r"\b(TL_CACHE|is_bridge|KeyValueCache|KeyValueCacheEntry|frozen_cache_entry|"
                           r"AbstractAttention|simple_attn_linear)\b|backend\.NAME\b|import[^\n]*\bNAME\b")
KNOWN: set[str] = set()


def test_no_module_outside_models_names_a_backend():
    root = PACKAGE.parent
    hits: dict[str, list[str]] = {}
    for folder in ("circuits", "benchmarks", "experiments"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith("circuits/models/"):
                continue
            lines = [f"{i}: {line.strip()}" for i, line in enumerate(path.read_text().splitlines(), 1)
                     if BACKEND_NAMES.search(line)]
            if lines:
                hits[rel] = lines
    unexpected = {k: v for k, v in hits.items() if k not in KNOWN}
    assert not unexpected, f"ask the model's backend for a capability instead: {unexpected}"
    stale = KNOWN - set(hits)
    assert not stale, f"nothing left to excuse in {sorted(stale)}: remove it from KNOWN"


def test_transformer_lens_3_internals_are_not_the_contract():
    for name in ("KeyValueCache", "KeyValueCacheEntry", "frozen_cache_entry", "AbstractAttention",
                 "simple_attn_linear", "TL_CACHE", "is_bridge"):
        assert name not in backend.__all__, name
        assert name not in CONTRACT, name


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


def test_a_new_backend_is_one_set_of_functions(tiny_llama, tokenizer):
    """The worked example of "add a backend": a backend that shares no prompt prefix is the installed line's functions
    with one capability changed, made a backend by ``implementation`` -- no other file changes. Attached to a copy of
    the model, every registered engine asks it for the capability and runs whole prompts, with the same scores."""
    import sys

    import torch

    from helpers import check_engine_against_reference

    installed = backend.installed()
    functions = dict(vars(sys.modules[type(installed).__module__]))
    functions["prefix_sharing"] = lambda model: False
    whole = backend.implementation(f"{installed.name}-whole-prompts", installed.model_class, functions)
    model = backend.attach(copy.copy(tiny_llama), whole)
    assert backend.backend_of(model) is whole and not backend.prefix_sharing(model)
    assert backend.prefix_sharing(tiny_llama)
    for name in ("screen", "eap-ig", "positions"):
        a = check_engine_against_reference(tiny_llama, tokenizer, name)
        b = check_engine_against_reference(model, tokenizer, name)
        for part, value in a.parts.items():
            torch.testing.assert_close(value, b.parts[part], atol=1e-5, rtol=1e-5, equal_nan=True)
