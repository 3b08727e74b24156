"""``import circuits as cc``: the handful of calls a notebook uses, each the library's own function."""

import circuits as cc


def test_facade_names_resolve_to_the_library():
    from circuits.patching import sweep
    from circuits.sft import finetune
    from circuits.viz.report import write_report

    assert cc.sweep is sweep and cc.finetune is finetune and cc.report is write_report
    for name in cc.__all__:
        assert getattr(cc, name) is not None
    assert {"load_model", "build_pairs", "sweep", "knockout", "attention_roles", "logit_lens", "finetune", "evaluate",
            "report", "patch", "direct_logit_attribution", "residual_lens", "head_circuits", "ov_figure",
            "use_threads", "replacement_values"} <= set(cc.__all__)


def test_the_facade_names_each_name_once_and_every_name_resolves():
    """One list (the TYPE_CHECKING imports of circuits/__init__.py) makes ``__all__``, ``dir(cc)`` and the lazy table;
    each name is the object its module defines under that name (or the alias's target)."""
    import importlib

    from circuits.lazy import type_checking_exports

    exports, aliases = type_checking_exports(cc.__file__)
    assert exports == cc._EXPORTS and aliases == cc._ALIASES == {"report": "write_report"}
    assert cc.__all__ == sorted(exports)
    assert dir(cc) == sorted(set(vars(cc)) | set(cc.__all__))  # what the module holds, and every lazy name
    for name, module in exports.items():
        assert getattr(cc, name) is getattr(importlib.import_module(module), aliases.get(name, name)), name


def test_the_export_reader_reads_aliases_and_refuses_a_name_twice(tmp_path):
    import pytest

    from circuits.lazy import type_checking_exports

    f = tmp_path / "init.py"
    f.write_text("if TYPE_CHECKING:\n    from a.b import x, y as z\n    from c import w\nfrom d import v\n")
    assert type_checking_exports(f) == ({"x": "a.b", "z": "a.b", "w": "c"}, {"z": "y"})
    f.write_text("if TYPE_CHECKING:\n    from a import x\n    from b import x\n")
    with pytest.raises(ValueError, match="twice"):
        type_checking_exports(f)


def test_the_readme_example_runs_on_a_tiny_model(tiny_llama):
    pairs = cc.build_pairs(tiny_llama, "addition", n_pairs=3, filter_correct=False, few_shot="on")
    scores = cc.sweep(tiny_llama, pairs).scores("fraction")
    heads = scores.key("top3")
    assert len(heads) == 3 and all(isinstance(h, cc.Head) for h, _ in heads)
    fig = cc.head_heatmap(scores.heads, scores.mlps, metric="fraction")
    assert len(fig.data) == 2


def test_every_lazy_package_names_each_name_once_and_every_name_resolves():
    """Each package whose ``__init__`` has a TYPE_CHECKING block (its one list of names) exports exactly those names,
    lazily, each the object its module defines."""
    import importlib
    from pathlib import Path

    from circuits.lazy import type_checking_exports

    root = Path(cc.__file__).parent
    packages = [".".join(("circuits", *p.parent.relative_to(root).parts)) for p in sorted(root.rglob("__init__.py"))
                if "if TYPE_CHECKING:" in p.read_text() and p.parent != root]
    assert {"circuits.data", "circuits.identify", "circuits.sft", "circuits.patching"} <= set(packages)
    for package in packages:
        mod = importlib.import_module(package)
        exports, aliases = type_checking_exports(mod.__file__)
        assert mod.__all__ == sorted(exports) and set(exports) <= set(dir(mod)), package
        for name, module in exports.items():
            assert getattr(mod, name) is getattr(importlib.import_module(module), aliases.get(name, name)), name
