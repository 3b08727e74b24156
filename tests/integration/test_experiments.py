"""Every experiment script on one framework: ``main(config)`` saves a typed result that ``--replot`` reads back;
key heads come from the shared identify result."""

from __future__ import annotations

import pytest
from experiment_runs import SCRIPTS, private_copy, run_all, script, tiny_config

from circuits.identify import IdentifyResult
from circuits.results import load_result


@pytest.fixture(scope="module")
def results():
    return run_all()


EXPECTED_KIND = {"fig2_key_heads": "identify", "fig3_knockout": "knockout", "fig4_transfer": "transfer",
                 "fig5_attention_roles": "attention", "fig6_mlp_logit_lens": "lens",
                 "fig7_attention_views": "attention-views", "fig15_per_operation": "per_operation",
                 "table3_exponentiation": "transfer", "table4_gsm8k": "word_problems",
                 "table1_precise_sft": "sft_table", "table2_components": "sft_table", "cross_model": "cross_model",
                 "screen_audit": "screen", "fig_information_flow": "positions", "fig_neurons": "neurons",
                 "fig_circuit": "edges", "fig3_ablation_kinds": "ablation_kinds", "stability": "stability",
                 "fig_fourier": "numbers"}


# faithfulness writes one result per model and operation under its --out; tests/unit/test_faithfulness_job.py checks
# its results and --replot
@pytest.mark.parametrize("name", [s for s in SCRIPTS if s != "faithfulness"])
def test_each_script_saves_its_result_and_replots(results, name, tmp_path):
    config = tiny_config(name, results)
    result = load_result(config.out)
    assert result.kind == EXPECTED_KIND[name]
    saved = result.config_json()  # saved with the config that made it (a nested identify config: its model inside)
    model = saved["model"] if "model" in saved else saved["identify"]["model"]
    assert (saved["models"] == list(config.models)) if name == "cross_model" else (model == config.model)
    figure = script(name).plot(result, tmp_path)  # --replot: from the saved result, no model
    assert figure.is_file() or figure == tmp_path / "figure.html" or figure.name == "table.md"


def test_figures_take_heads_from_the_shared_identify_result(results):
    addition = IdentifyResult.load(results / "identify" / "addition")
    ko = load_result(results / "fig3_knockout")
    assert ko.curve.ranking[:2] == addition.scores(None).top(2, "heads")
    assert load_result(results / "fig4_transfer").key_heads == addition.top_heads(2)
    assert load_result(results / "fig5_attention_roles").heads == addition.top_heads(2)
    assert load_result(results / "table1_precise_sft").heads == addition.top_heads(2)
    per_op = load_result(results / "fig15_per_operation")
    assert per_op.key_heads["addition"] == addition.top_heads(3)


def test_tables_resume_from_their_rows(results, capsys, tmp_path):
    name = "table1_precise_sft"
    results = private_copy(results, tmp_path)  # (rows are kept for their own config, which names their folder)
    script(name).main(tiny_config(name, results))
    capsys.readouterr()
    script(name).main(tiny_config(name, results))
    assert capsys.readouterr().out.count("finished earlier") == 3
    changed = tiny_config(name, results).replace(lr=3e-4)
    assert changed.finetune_config(full=True).lr == 3e-4


def test_scaled_head_counts():
    t2 = script("table2_components")
    assert t2.scaled_counts(1024) == [8, 16, 32, 48, 64]
    assert t2.scaled_counts(270) == [2, 4, 8, 13, 17]
    assert t2.scaled_counts(12) == [1]


def test_table_flags_are_shared_and_full_size_changes_defaults():
    import _sft

    t1, t2 = script("table1_precise_sft"), script("table2_components")
    c1 = _sft.parse(t1.Config, ["--eval-limit", "5", "--lr", "3e-4", "--eval-batch-size", "64", "--data-dir", "/d",
                                "--choice-limit", "7"], None)
    assert (c1.eval_limit, c1.lr, c1.eval_batch_size, c1.data_dir, c1.math_limit, c1.choice_limit) == (5, 3e-4, 64, "/d", 4, 7)
    full = _sft.parse(t1.Config, ["--full-size"], None)
    assert (full.eval_limit, full.choice_limit, full.math_limit, full.limit_per_source) == (None, None, None, None)
    c2 = _sft.parse(t2.Config, ["--full-size", "--epochs", "1", "--limit-per-source", "100", "--mlp-counts", "1,2"], None)
    assert (c2.epochs, c2.limit_per_source, c2.lr, c2.out) == (1, 100, 2e-5, "results/table2")
    assert c2.eval_tasks == ("gsm8k", "arithmetic", "mmlu") and c2.mlp_counts == (1, 2)
    with pytest.raises(ValueError):
        t1.Config(eval_tasks=("nope",))
    with pytest.raises(ValueError, match="--choice-limit 0: must be at least 1"):
        t1.Config(choice_limit=0)


def test_train_speed_flops():
    from types import SimpleNamespace

    from train_speed import layer_flops_per_token

    cfg = SimpleNamespace(n_key_value_heads=3, n_heads=9, d_model=576, d_head=64, d_mlp=1536, gated_mlp=True)
    assert layer_flops_per_token(cfg) == 2.0 * (576 * 64 * (18 + 6) + 576 * 1536 * 3)


def test_cross_model_measures_each_model_from_its_own_identify_results(results, tmp_path):
    import cross_model

    results = private_copy(results, tmp_path)
    r = load_result(results / "cross_model")
    config = tiny_config("cross_model", results)
    assert r.names() == list(config.models) and len(r.names()) == 2
    for name in r.names():
        d = r.models[name]
        folder = cross_model.key_head_config(config, name).identify_folder("addition")
        addition = IdentifyResult.load(folder)
        assert d["operations"]["addition"]["key_heads"] == [list(h) for h, _ in addition.key_heads()]
        assert d["operations"]["addition"]["share_key_heads"] == len(addition.key_heads()) / (d["n_layers"] * d["n_heads"])
        assert d["knockout"]["ranking"][:2] == [list(h) for h in addition.scores(None).top(2, "heads")]
        assert set(d["transfer"]) == {"multi_digit", "decimal", "time_span"}
        assert len(d["logit_lens"]["delta_C"]) == d["n_layers"]
    assert r.models[r.names()[1]]["architecture"] == "Gemma3ForCausalLM"
    # A second run finds each model measured and only saves the result again.
    assert cross_model.main(config).models == r.models
