"""The identify result: one ranking of every head, saved and loaded, older folders still read; the job resumes."""

import json
import shutil

import pytest
import torch

from circuits.data.templates import OPERATIONS
from circuits.identify import IdentifyConfig, IdentifyResult, PerOperation, identify, load_identify
from circuits.identify.job import run, task_folders
from circuits.identify.result import PerOperationConfig
from circuits.patching import sweep
from circuits.identify.result import ResultError
from circuits.results import MARKER, load_result
from circuits.types import Head

CONFIG = IdentifyConfig(task="addition", n_pairs=6, few_shot="on", filter_correct=False, key_rule="top3")


@pytest.fixture(scope="module")
def result(tiny_llama):
    return identify(tiny_llama, config=CONFIG, progress=False)


def test_ranking_covers_every_head_and_key_heads_lead_it(result, tiny_llama):
    n = tiny_llama.cfg.n_layers * tiny_llama.cfg.n_heads
    ranked = result.scores().ranked(part="heads")
    assert len(ranked) == n and len({h for h, _ in ranked}) == n
    effects = [e for _, e in ranked]
    assert effects == sorted(effects, reverse=True)  # fraction: larger is more important
    keys = result.key_heads()
    assert [h for h, _ in keys] == [h for h, _ in ranked[:3]]
    assert result.top_heads(5) == [h for h, _ in ranked[:5]]
    assert [h for h, _ in result.key_heads("top2:relative_logit")] == result.scores("relative_logit").top(2, "heads")
    summary = result.summary()
    assert len(summary["ranked_heads"]) == n  # every head, not the first 20
    assert summary["key_heads"] == [[h.layer, h.head, e] for h, e in keys]
    assert set(summary["metrics"]) == {"relative_logit", "fraction", "logit_diff", "prob", "answer_logprob"}


def test_save_and_load_roundtrip(result, tmp_path):
    out = result.save(tmp_path / "addition")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["_assets", "circuits.json", "config.json", "heads.html", "pairs.jsonl", "summary.json", "sweep.pt"])
    assert not (tmp_path / "_assets").exists()  # heads.html's plotly.js lies inside the result folder, not above it
    back = IdentifyResult.load(out)
    assert back.config == CONFIG and back.pairs == result.pairs
    assert back.scores().ranked(part="heads") == result.scores().ranked(part="heads")
    assert back.scores().key(back.key_rule, "mlps") == result.scores().key(result.key_rule, "mlps")
    assert load_result(out).kind == "identify"
    html = (out / "heads.html").read_text()
    assert "plotly" in html and '<script src="http' not in html  # plotly.js embedded, no CDN


def test_no_marker_is_no_result_and_the_summary_alone_is_read(result, tmp_path):
    """A folder without the marker holds no result (no release wrote one); a result without per-pair values (no
    sweep.pt) is read from its summary's mean effects."""
    out = result.save(tmp_path / "old")
    (out / MARKER).unlink()
    with pytest.raises(ResultError, match="holds no circuits result"):
        IdentifyResult.load(out)
    out = result.save(tmp_path / "summary-only")
    (out / "sweep.pt").unlink()
    summary_only = IdentifyResult.load(out)
    assert summary_only.sweep is None
    for (h1, e1), (h2, e2) in zip(summary_only.scores().ranked(part="heads"), result.scores().ranked(part="heads")):
        assert h1 == h2 and e1 == pytest.approx(e2, rel=1e-6)


def test_the_summary_file_holds_the_same_float32_numbers_in_less_text(result, tmp_path):
    """summary.json writes its lists of numbers on one line in float32's shortest digits (issue 44): every effect and
    interval grid reads back as the very float32 tensor the result holds, the scalars are as they were, and the file
    is shorter than the indented JSON it replaced (on this tiny model 74%; the demo's SmolLM2 summaries 49%)."""
    from circuits.io import to_jsonable

    out = result.save(tmp_path / "compact")
    text = (out / "summary.json").read_text()
    saved, held = json.loads(text), to_jsonable({**result.summary(), "pair_stats": result.pair_stats,
                                                 "weights": result.weights})
    assert saved.keys() == held.keys()
    for m, parts in held["metrics"].items():
        for name, value in parts.items():
            if isinstance(value, list):
                got, want = torch.tensor(saved["metrics"][m][name]), torch.tensor(value, dtype=torch.float32)
                assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())
            else:
                assert saved["metrics"][m][name] == value
    assert saved["seconds"] == held["seconds"] and saved["pair_stats"] == held["pair_stats"]
    assert saved["validity"] == held["validity"] and saved["config"] == held["config"]
    assert [h[:2] for h in saved["ranked_heads"]] == [h[:2] for h in held["ranked_heads"]]
    assert '"head_effects": [[' in text  # a grid on one line
    assert len(text) <= 0.8 * len(json.dumps(held, indent=1))
    assert IdentifyResult.load(out).scores().ranked(part="heads") == result.scores().ranked(part="heads")


def test_corrupt_files_are_named(result, tmp_path):
    out = result.save(tmp_path / "bad")
    (out / "pairs.jsonl").write_text((out / "pairs.jsonl").read_text()[:-40])
    with pytest.raises(ValueError, match=r"pairs.jsonl, line \d+: not valid JSON"):
        IdentifyResult.load(out)
    shutil.rmtree(out)
    out = result.save(tmp_path / "bad")
    (out / "sweep.pt").write_bytes(b"not a tensor file")
    with pytest.raises(ResultError, match="sweep.pt cannot be read as a sweep file"):
        IdentifyResult.load(out)


def test_load_identify_on_the_parent_of_task_folders(result, tmp_path):
    result.save(tmp_path / "addition")
    result.save(tmp_path / "all")
    with pytest.raises(ResultError, match=r"one identify result per task \(addition, all\).*addition"):
        load_identify(tmp_path)
    with pytest.raises(ResultError, match="holds no identify result"):
        load_identify(tmp_path / "missing")
    assert load_identify(tmp_path / "addition").top_heads(2) == result.top_heads(2)


def test_load_identify_names_the_other_kinds_below_a_folder(tmp_path):
    """A folder of other jobs' results (docs/data: carry, sft-study) is not read as identify results per task."""
    other = tmp_path / "carry_smollm2"
    other.mkdir()
    (other / "summary.json").write_text("{}")
    (other / "circuits.json").write_text('{"kind": "carry", "version": 1, "files": []}')
    with pytest.raises(ResultError, match=r"holds no identify result \(the results below it are carry_smollm2: carry\)"):
        load_identify(tmp_path)


def test_run_identify_writes_resumes_and_pools(tiny_llama, tmp_path, capsys):
    config = CONFIG.replace(task="all", n_pairs=4)
    returned = run(config, tmp_path / "identify", model=tiny_llama, progress=False)
    folders = task_folders(config, tmp_path / "identify")
    assert sorted(folders) == ["addition", "all", "division", "multiplication", "subtraction"]
    assert returned.pairs == IdentifyResult.load(folders["all"]).pairs and returned.task == "all"
    # no temporary folders left; _assets holds the one plotly.js the heads.html pages share
    assert sorted(p.name for p in (tmp_path / "identify").iterdir() if p.name != "_assets") == sorted(folders)
    pooled = IdentifyResult.load(folders["all"])
    assert len(pooled.pairs) == 4 and set(pooled.per_task) == {"addition", "subtraction", "multiplication", "division"}
    # The pooled sweep reuses the operations' per-pair values: what a sweep over the pooled pairs computes.
    assert {p.operation for p in pooled.pairs} == set(OPERATIONS)
    fresh = sweep(tiny_llama, pooled.pairs, config.mode, progress=False)
    for name, value in fresh.tensors().items():
        if isinstance(value, torch.Tensor):
            mine = pooled.sweep.tensors()[name]
            if name.endswith("_prob"):  # computed for each operation's key components only, NaN elsewhere
                assert name == "mlp_prob" or (mine.isnan().any() and not mine.isnan().all())
                mine, value = mine[~mine.isnan()], value[~mine.isnan()]
            torch.testing.assert_close(mine, value, atol=1e-4, rtol=1e-4)
    for name, value in fresh.baseline.to_dict().items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(getattr(pooled.sweep.baseline, name), value, atol=1e-4, rtol=1e-4)
    stamp = (folders["addition"] / "summary.json").stat().st_mtime_ns
    capsys.readouterr()
    assert run(config, tmp_path / "identify", model=tiny_llama, progress=False).pairs == returned.pairs  # resumed
    assert capsys.readouterr().out.count("resumed") == 5
    assert (folders["addition"] / "summary.json").stat().st_mtime_ns == stamp


def _tensor_rows(path):
    """Every per-pair row (one pair's values of one readout) of a sweep.pt, as bytes."""
    from circuits.patching.engines.end_sweep_files import unpack_unmeasured

    t = unpack_unmeasured(torch.load(path, weights_only=True), path)
    return {(k, v[..., i].contiguous().numpy().tobytes()) for k, v in t.items() if torch.is_tensor(v) and
            k.endswith("logit") for i in range(v.shape[-1])}


def test_the_pooled_result_copies_no_tensor_file_of_its_operations(tiny_llama, tmp_path):
    """--task all's all/ keeps no copy of its operations' files (issue 44): no sweep.pt or pairs.jsonl of its own but
    pooled.json, no two sweep.pt files under the output share a pair's row, and it loads as exactly the result the
    job returned; a sibling changed since is one line, and the result saved elsewhere still holds its own files."""
    config = CONFIG.replace(task="all", n_pairs=4)
    returned = run(config, tmp_path / "identify", model=tiny_llama, progress=False)
    folders = task_folders(config, tmp_path / "identify")
    names = {p.name for p in folders["all"].iterdir()}
    assert "pooled.json" in names and not names & {"sweep.pt", "pairs.jsonl"}
    rows = [_tensor_rows(p) for p in sorted((tmp_path / "identify").rglob("*.pt"))]
    assert len(rows) == 4 and all(not (a & b) for i, a in enumerate(rows) for b in rows[i + 1:])
    back = IdentifyResult.load(folders["all"])
    assert back.pairs == returned.pairs and back.per_task == returned.per_task
    for name, value in returned.sweep.tensors().items():
        if torch.is_tensor(value):
            got = back.sweep.tensors()[name]
            assert torch.equal(got.isnan(), value.isnan()) and torch.equal(got.nan_to_num(), value.nan_to_num())
    assert back.scores().ranked(part="heads") == returned.scores().ranked(part="heads") and back.key_heads() == returned.key_heads()
    alone = returned.save(tmp_path / "elsewhere" / "all")  # no siblings there: its own pairs.jsonl and sweep.pt
    assert {"sweep.pt", "pairs.jsonl"} <= {p.name for p in alone.iterdir()}
    assert IdentifyResult.load(alone).pairs == returned.pairs
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "identify", copy)
    (copy / "addition" / "pairs.jsonl").write_text((copy / "addition" / "pairs.jsonl").read_text() + "\n")
    with pytest.raises(ResultError, match=r"pools pairs of .*addition, whose pairs.jsonl has changed since"):
        IdentifyResult.load(copy / "all")
    shutil.copy(folders["addition"] / "pairs.jsonl", copy / "addition" / "pairs.jsonl")
    assert IdentifyResult.load(copy / "all").pairs == returned.pairs
    shutil.rmtree(copy / "subtraction")
    with pytest.raises(ResultError, match=r"pools pairs of .*subtraction and needs its pairs.jsonl"):
        IdentifyResult.load(copy / "all")


def test_per_operation_roundtrip(result, tmp_path):
    per = PerOperation.from_identify(PerOperationConfig(top=3), {"addition": result, "subtraction": result}, top=3)
    assert per.overlap == [[3, 3], [3, 3]]
    back = PerOperation.load(per.save(tmp_path / "fig15"))
    assert back == per and back.overlap == per.overlap
    assert all(isinstance(h, Head) for h in back.key_heads["addition"])


def test_config_validation():
    with pytest.raises(ValueError, match="Unknown mode"):
        IdentifyConfig(mode="causal")
    with pytest.raises(ValueError, match="^--pairs 0: must be at least 1$"):
        IdentifyConfig(n_pairs=0)
    with pytest.raises(ValueError, match="Unknown task"):
        IdentifyConfig(task="modulo")
    assert IdentifyConfig.from_json(json.loads(json.dumps(CONFIG.to_json()))) == CONFIG


def test_counterfactual_statistics_come_from_the_sweep(tiny_llama):
    """The job skips build_pairs' own run of the counterfactual prompts (the sweep runs them): the statistics it
    saves, overall and per template, equal what that run gives."""
    from circuits.data.pairs import PairConfig, build_pairs

    config = IdentifyConfig(task="addition", n_pairs=6, filter_correct=False)
    checked = build_pairs(tiny_llama, config.pair_config())
    skipped = build_pairs(tiny_llama, config.pair_config(), check_counterfactual=False)
    assert isinstance(config.pair_config(), PairConfig) and skipped.pairs == checked.pairs
    assert torch.isnan(torch.tensor(skipped.counterfactual_accuracy))
    assert all("counterfactual_accuracy" not in t for t in skipped.per_template.values())
    result = identify(tiny_llama, config=config, progress=False)
    templates = result.pair_stats["per_template"]
    assert templates.keys() == checked.per_template.keys() and len(templates) > 1
    for tid, want in checked.per_template.items():
        assert templates[tid]["counterfactual_accuracy"] == want["counterfactual_accuracy"]
        assert templates[tid]["counterfactual_answer_prob"] == pytest.approx(want["counterfactual_answer_prob"], abs=1e-5)
    summary = result.summary()
    assert summary["counterfactual_accuracy"] == checked.counterfactual_accuracy
    assert summary["counterfactual_answer_prob"] == pytest.approx(checked.counterfactual_answer_prob, abs=1e-5)


def test_sweep_file_keeps_the_answer_probability_of_the_measured_components_only(result, tmp_path):
    """With prob='key' the answer probability is measured for the key components alone: sweep.pt stores those rows
    and the mask (issue 44) instead of a grid of NaN, and reads back as the same tensor; a sweep.pt written before,
    with full grids, still loads; a packed entry that does not fit is one line naming the file."""
    from circuits.io import save_torch

    assert result.config.prob == "key"
    out = result.save(tmp_path / "packed")
    raw = torch.load(out / "sweep.pt", weights_only=True)
    assert isinstance(raw["head_prob"], dict) and torch.is_tensor(raw["head_logit"])  # logits: measured everywhere
    assert int(raw["head_prob"]["measured"].sum()) == raw["head_prob"]["values"].shape[0] >= 3
    back = IdentifyResult.load(out)
    for name, held in result.sweep.tensors().items():
        if torch.is_tensor(held):
            got = back.sweep.tensors()[name]
            assert torch.equal(got.isnan(), held.isnan()) and torch.equal(got.nan_to_num(), held.nan_to_num()), name
    save_torch(result.sweep.tensors(), out / "sweep.pt")  # the layout before: full grids, NaN included
    assert IdentifyResult.load(out).scores("prob").ranked(part="heads") == result.scores("prob").ranked(part="heads")
    raw["head_prob"]["values"] = raw["head_prob"]["values"][:1]
    save_torch(raw, out / "sweep.pt")
    with pytest.raises(ResultError, match=r"sweep.pt: head_prob.values has 1 rows for the \d+ components"):
        IdentifyResult.load(out)
