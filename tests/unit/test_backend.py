"""The model seam: every TransformerLens internal the package uses outside its model code comes from
circuits.models.backend, whose Backend contract both implementations (TransformerLens 3.9's HookedTransformer,
TransformerLens 4's TransformerBridge) define whole; the model carries its backend, and no module outside
circuits/models/ branches on which one it is."""

import ast
import copy
import pickle
import re
import sys
from pathlib import Path

import pytest
import torch

import circuits
from circuits.models import backend
from circuits.versions import backend_line

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


CONTRACT = set(backend.Backend.__abstractmethods__)
IMPLEMENTATIONS = {"_hooked.py": "HookedBackend", "_bridge.py": "BridgeBackend"}


def _class_methods(path: Path, cls: str) -> set[str]:
    """The names a module's class ``cls`` defines (methods, class attributes), read from its source."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            names = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            return names | {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets
                            if isinstance(t, ast.Name)}
    raise AssertionError(f"{path.name} defines no class {cls}")


def test_both_backends_implement_the_whole_contract():
    """Both implementation classes define every method of :class:`Backend` and its ``name``/``model_class``/``line``
    (read from their source, so the check runs on either TransformerLens line) and are registered (``@register``);
    the installed one is in the registry under its name, for its line."""
    assert len(CONTRACT) > 30
    for impl, cls in IMPLEMENTATIONS.items():
        source = PACKAGE / "models" / impl
        missing = (CONTRACT | {"name", "model_class", "line"}) - _class_methods(source, cls)
        assert not missing, f"{impl} lacks {sorted(missing)}"
        assert f"@register\nclass {cls}(Backend):" in source.read_text(), impl
    cls = backend.installed()
    assert backend.BACKENDS[cls.name] is cls and issubclass(cls, backend.Backend) and not cls.__abstractmethods__
    assert cls.line == backend_line()


def test_a_backend_missing_a_method_is_one_line():
    class Partial(backend.Backend):
        name = "partial"

        def final_residual(self, tokens, **kwargs):
            return tokens

    with pytest.raises(TypeError, match="Partial lacks the contract's .*attn_qkv"):
        backend.register(Partial)
    assert "partial" not in backend.BACKENDS


def test_no_forwarding_functions_are_left():
    """The seam module holds the contract and the model-free helpers, not one function per method: a capability is
    ``model.backend.f(...)``."""
    for name in CONTRACT - {"load", "official_name", "reference_weights"}:
        assert not hasattr(backend, name), name


def test_the_model_carries_its_backend(tiny_llama):
    """load_model attaches the installed line's backend, bound to the model; a deep copy and a pickled copy carry one
    bound to the copy; a model built directly is recognised by its class, anything else gets the installed line's."""
    assert type(tiny_llama.backend) is backend.installed() and tiny_llama.backend.model is tiny_llama
    assert backend.backend_of(tiny_llama) is tiny_llama.backend
    twin = copy.deepcopy(tiny_llama)
    assert type(twin.backend) is type(tiny_llama.backend) and twin.backend.model is twin
    try:
        data = pickle.dumps(tiny_llama)
    except AttributeError:  # a TransformerBridge does not pickle (TransformerLens 4's hooks are local classes)
        data = None
    if data is not None:
        again = pickle.loads(data)
        assert again.backend.model is again
        torch.testing.assert_close(again.backend.final_residual(torch.tensor([[1, 2, 3]])),
                                   tiny_llama.backend.final_residual(torch.tensor([[1, 2, 3]])))
    shallow = copy.copy(tiny_llama)  # shares the original's backend object: backend_of binds it its own
    assert backend.backend_of(shallow).model is shallow and tiny_llama.backend.model is tiny_llama

    class Other:
        pass

    assert type(backend.backend_of(Other())) is backend.installed()
    for cls in backend.BACKENDS.values():  # each registered class recognises its own models
        bare = cls.model_class.__new__(cls.model_class)
        assert type(backend.backend_of(bare)) is cls


def test_a_model_frees_without_the_garbage_collector():
    """The backend holds its model weakly: a model without cycles of its own is freed as its last name goes."""
    import gc
    import weakref

    from helpers import tiny_model

    model = tiny_model("llama")
    ref = weakref.ref(model)
    model.backend.final_residual(torch.tensor([[1, 2]]))
    gc.disable()
    try:
        del model
        freed = ref() is None
    finally:
        gc.enable()
    assert freed or backend.installed().line != 3  # a TransformerBridge has cycles of its own (TransformerLens 4)


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
    assert backend_line("3.9.0") == 3
    assert backend_line("4.3.0") == 4 and backend_line("4.7.1") == 4
    for bad in ("3.8.1", "4.0.0", "4.2.0", "5.0.0"):
        try:
            backend_line(bad)
        except backend.UnsupportedTransformerLens as err:
            assert bad in str(err) and "3.9" in str(err) and "4.3" in str(err) and "\n" not in str(err)
        else:
            raise AssertionError(f"{bad} accepted")


def test_seam_names_are_transformer_lens_own():
    if backend.installed().line == 4:
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


TOY = """
from circuits.models.backend import installed, register


@register
class WholePrompts(installed()):
    \"\"\"The installed line's backend, sharing no prompt prefix.\"\"\"

    name = "whole-prompts"
    line = None  # attached by hand, never the default of a line

    def prefix_sharing(self):
        return False
"""


def test_a_new_backend_is_one_module(tiny_llama, tokenizer, tmp_path, monkeypatch):
    """The worked example of "add a backend": one module in a folder of its own (here the installed line's backend
    with one capability changed) registers its class by importing it: 1 file written, none of the toolkit's edited.
    Attached to a copy of the model, every registered engine asks it for the capability and runs whole prompts, with
    the same scores."""
    import importlib
    import hashlib

    from helpers import check_engine_against_reference

    def digest() -> dict[str, str]:
        return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(PACKAGE.rglob("*.py"))}

    before = digest()
    (tmp_path / "toy_backend.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(backend, "BACKENDS", dict(backend.BACKENDS))  # the registration undone after the test
    toy = importlib.import_module("toy_backend").WholePrompts
    try:
        written = [p for p in tmp_path.rglob("*.py")]
        assert len(written) == 1 and digest() == before  # 1 module, 0 edits
        assert backend.BACKENDS["whole-prompts"] is toy and backend.installed() is not toy
        model = backend.attach(copy.deepcopy(tiny_llama), toy)
        assert type(model.backend) is toy and not model.backend.prefix_sharing()
        assert tiny_llama.backend.prefix_sharing()
        for name in ("screen", "eap-ig", "positions"):
            a = check_engine_against_reference(tiny_llama, tokenizer, name)
            b = check_engine_against_reference(model, tokenizer, name)
            for part, value in a.parts.items():
                torch.testing.assert_close(value, b.parts[part], atol=1e-5, rtol=1e-5, equal_nan=True)
    finally:
        sys.modules.pop("toy_backend", None)


def test_no_branch_on_a_backend_name_in_the_seam_loading_or_versions():
    """The registry chooses the backend (by the installed line, :func:`circuits.versions.backend_line`): neither the
    seam, nor loading, nor the version rule compares or maps a backend's name."""
    by_name = re.compile(r"""[=!]=\s*["'](hooked|bridge)["']|["'](hooked|bridge)["']\s*[=!]=|:\s*["'](hooked|bridge)["']"""
                         r"""\s*[,}]|\bNAME\b""")
    for rel in ("models/__init__.py", "models/backend.py", "models/loading.py", "versions.py"):
        lines = [f"{i}: {line.strip()}" for i, line in enumerate((PACKAGE / rel).read_text().splitlines(), 1)
                 if by_name.search(line)]
        assert not lines, f"{rel} chooses a backend by name: {lines}"
