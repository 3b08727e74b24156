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


def test_the_readme_example_runs_on_a_tiny_model(tiny_llama):
    pairs = cc.build_pairs(tiny_llama, "addition", n_pairs=3, filter_correct=False, few_shot="on")
    result = cc.sweep(tiny_llama, pairs, progress=False)
    heads = result.key_heads("top3")
    assert len(heads) == 3 and all(isinstance(h, cc.Head) for h, _ in heads)
    fig = cc.head_heatmap(*result.effects("fraction"), metric="fraction")
    assert len(fig.data) == 2
