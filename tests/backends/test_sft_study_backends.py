"""The Precise SFT study on a tiny Llama, on either line (issue 39): each arm trains only the parameters it names
(counted element by element against a count by hand), LoRA's trained count is peft's own and matches Precise SFT's
within half a rank, the merged LoRA model is the peft model, the lr sweep scores only validation items, and the
saved result loads back equal; a rerun reuses every finished run."""

from __future__ import annotations

import helpers
import pytest
import torch

from circuits.data.arithmetic import arithmetic_train_items
from circuits.evaluation import study
from circuits.sft.data import tokenize_examples
from circuits.evaluation.study_config import STUDY_TRAIN, StudyConfig
from circuits.evaluation.study_result import SFTStudyResult
from circuits.types import Head

try:
    import peft  # noqa: F401

    HAVE_PEFT = True
except ImportError:
    HAVE_PEFT = False
needs_peft = pytest.mark.skipif(not HAVE_PEFT, reason="peft is not installed (pip install -e '.[peft]'): the LoRA "
                                                      "arm's tests need it")

D, DH, GROUP, D_MLP = 64, 16, 2, 96  # the tiny Llama: d_model, d_head, query heads per K/V head, d_mlp
KEY = (Head(1, 0), Head(2, 3))


def _config(**kw) -> StudyConfig:
    train = STUDY_TRAIN.replace(model=str(helpers.tiny_dir("llama")), sources=("arithmetic",), n_arithmetic=24,
                                batch_size=8, micro_batch_size=4, max_length=32, warmup_ratio=0.0)
    base = dict(train=train, key_heads=KEY, key_mlps=(1,), random_draws=2, seeds=(0, 1, 2), lrs=(1e-3, 1e-2),
                per_form=4, two_digit=8, val_per_form=3, n_boot=100)
    return StudyConfig(**{**base, **kw})


def _by_hand(heads, mlps=()) -> int:
    """Q and O rows of each head, K and V rows of each K/V head any of them reads, whole MLPs (no biases: Llama)."""
    kv = {(h.layer, h.head // GROUP) for h in heads}
    return len(heads) * 2 * D * DH + len(kv) * 2 * D * DH + len(mlps) * 3 * D * D_MLP


def _data(model, seed=0):
    return {seed: tokenize_examples(model.tokenizer, arithmetic_train_items(24, seed), 32)}


def test_each_arm_trains_only_the_parameters_it_names():
    model = helpers.tiny_model("llama")
    config = _config(arms=("precise", "random", "precise_mlps", "full"))
    arms = study.variants(config, model, KEY, (1,), None)
    trainer = study._Trainer(config, model, _data(model))
    total = sum(p.numel() for p in model.parameters())
    for v in arms:
        heads = tuple(Head(*h) for h in v["heads"])
        trainer.restore()
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        _, stats = trainer.train(v, 1e-2, 0)
        changed = sum(int((p.detach() != before[n]).sum()) for n, p in model.named_parameters())
        assert changed == v["tuned_parameters"] == stats["tuned_parameters"], v["name"]
        if v["arm"] == "full":
            # every weight but the zero placeholder biases (3.9) and the norm weights, folded into the next matrices
            # (on 4.3 still parameters: 2 per layer and the final one)
            placeholders = sum(int((b == 0).all()) * b.numel() for n, b in before.items() if "b_" in n.split(".")[-1])
            assert total - placeholders - 7 * D <= changed <= total
        else:
            assert changed == _by_hand(heads, v["mlps"]), v["name"]
        if v["arm"] == "random":
            assert not set(heads) & set(KEY) and all(1 <= h.layer <= 2 for h in heads)
    draws = [tuple(map(tuple, v["heads"])) for v in arms if v["arm"] == "random"]
    assert len(set(draws)) == 2


@needs_peft
def test_lora_count_is_peft_own_and_matches_precise_sft_within_half_a_rank():
    from circuits.models.sources import load_hf_reference
    from circuits.sft.arms import lora_per_rank, lora_rank, wrap_lora
    from circuits.evaluation.study_config import LORA_TARGETS

    hf = load_hf_reference(helpers.tiny_dir("llama"))
    per_rank = lora_per_rank(hf, LORA_TARGETS)
    assert per_rank == 3 * (2 * (D + D) + 2 * (D + D // GROUP))  # per layer q, o: 64 in + 64 out; k, v: 64 + 32
    target = _by_hand(KEY)
    r = lora_rank(target, per_rank)
    wrapped = wrap_lora(hf, r, LORA_TARGETS, seed=0)
    plain = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    trainable, _ = wrapped.get_nb_trainable_parameters()
    assert plain == trainable == r * per_rank
    assert abs(trainable - target) <= per_rank / 2
    model = helpers.tiny_model("llama")
    arm = study.variants(_config(arms=("precise", "lora")), model, KEY, (), per_rank)
    assert arm[1]["lora_rank"] == r and arm[1]["tuned_parameters"] == trainable == r * per_rank
    assert arm[1]["target_parameters"] == arm[0]["tuned_parameters"] == target


@needs_peft
def test_lora_trains_only_its_adapters_and_the_merged_model_is_the_peft_model():
    from circuits.models.forward import pad_token_id
    from circuits.models.sources import load_hf_reference
    from circuits.sft.arms import merged_model, train_lora
    from circuits.evaluation.study_config import LORA_TARGETS

    model = helpers.tiny_model("llama")
    tokens = torch.tensor([model.tokenizer("12 + 34 = 46\n7 + 8 = ").input_ids])
    hf = load_hf_reference(helpers.tiny_dir("llama"))
    base = {n: p.detach().clone() for n, p in hf.named_parameters()}
    run = _config().run_config(lr=1e-2, seed=0, full=True)
    wrapped, stats = train_lora(hf, _data(model)[0], run, 2, LORA_TARGETS, pad_token_id(model))
    changed = {n for n, p in wrapped.named_parameters() if "lora_" not in n
               and not torch.equal(p, base[n.removeprefix("base_model.model.").replace(".base_layer", "")])}
    assert not changed  # the base weights are untouched; only the adapters trained
    assert stats["tuned_parameters"] == sum(p.numel() for n, p in wrapped.named_parameters() if "lora_" in n)
    assert any(not torch.equal(p, torch.zeros_like(p)) for n, p in wrapped.named_parameters() if "lora_B" in n)
    with torch.no_grad():
        expected = wrapped(input_ids=tokens).logits
    merged = merged_model(wrapped, model.tokenizer, "float32", "cpu")
    with torch.no_grad():
        got = merged(tokens)
        untrained = model(tokens)
    assert torch.allclose(got, expected, atol=1e-4), float((got - expected).abs().max())
    assert not torch.allclose(got, untrained, atol=1e-3)  # (and the training moved it)


def test_the_sweep_sees_only_validation_items_and_the_result_loads_back_equal(tmp_path, monkeypatch):
    arms = ("precise", "random", "precise_mlps", "full") + (("lora",) if HAVE_PEFT else ())
    config = _config(arms=arms)
    calls = []
    real = study.score_items

    def recording(model, items, *args):  # the study scores one group of items a pass (study._group)
        groups = {study._group(it) for it in items}
        assert len(groups) == 1, groups
        group = groups.pop()
        if not calls or group in calls[-1][0]:  # a group seen again: the next evaluation's first pass
            calls.append((set(), []))
        calls[-1][0].add(group)
        calls[-1][1].extend(it.context for it in items)
        return real(model, items, *args)

    monkeypatch.setattr(study, "score_items", recording)
    result = study.run(config, tmp_path / "study", model=helpers.tiny_model("llama"), progress=False)
    calls = [contexts for _, contexts in calls]  # one list of items per evaluation
    assert SFTStudyResult.load(tmp_path / "study") == result
    n_var = len(result.variants)
    assert n_var == len(arms) + 1  # two random draws
    test = set(calls[0])  # the base model, on the test items
    per_variant = len(config.lrs) + len(config.seeds)
    assert len(calls) == 1 + n_var * per_variant
    for k in range(n_var):
        block = calls[1 + k * per_variant: 1 + (k + 1) * per_variant]
        sweep, final = block[: len(config.lrs)], block[len(config.lrs):]
        assert all(not set(c) & test for c in sweep)  # the sweep never scores a test item
        assert all(set(c) == test for c in final)
    for v in result.variants:
        mine = [s for s in result.sweep if s["variant"] == v["name"]]
        assert v["lr"] == max(mine, key=lambda s: s["val_logp"])["lr"]
        runs = [r for r in result.runs if r["variant"] == v["name"]]
        assert [r["seed"] for r in runs] == [0, 1, 2] and all(len(r["correct"]) == len(result.items) for r in runs)
    rows = result.table()
    for row in rows:  # every arm's paired difference from the base model, on the same items
        c = row["tasks"]["arithmetic"]
        assert abs(c["vs_base"]["diff"] - (c["mean"] - c["base"])) < 1e-9
        assert c["vs_base"]["low"] <= c["vs_base"]["diff"] <= c["vs_base"]["high"]
    assert "paired difference from the base model" in result.markdown()
    assert "vs_precise" not in rows[0]["tasks"]["arithmetic"]
    for row in rows[1:]:
        cell = row["tasks"]["arithmetic"]
        assert cell["low"] <= cell["mean"] <= cell["high"] and "vs_precise" in cell
    assert result.timing["train"] > 0 and result.timing["eval"] > 0
    assert "Precise SFT (random heads, draw 1)" in (tmp_path / "study" / "table.md").read_text()

    # Run again into the same folder: every finished run is reused, nothing trains or scores again.
    def refuse(*args, **kwargs):
        raise AssertionError("a finished run was computed again")

    monkeypatch.setattr(study._Trainer, "train", refuse)
    monkeypatch.setattr(study._Trainer, "score", refuse)
    again = study.run(config, tmp_path / "study", model=helpers.tiny_model("llama"), progress=False)
    assert again.runs == result.runs and again.sweep == result.sweep and again.base == result.base
    assert again.timing["reused_runs"] == len(calls)


def test_workers_run_the_same_study_as_one_process(tmp_path):
    """``--workers 2``: two spawned processes train and score the variants dealt to them, then the study reads their
    runs back. Same variants, lrs, seeds, items and per-item scores as one process (log-probabilities within float
    noise: the processes run one thread each)."""
    config = _config(arms=("precise", "random"), lrs=(1e-3,), threads=1)
    one = study.run(config, tmp_path / "one", model=helpers.tiny_model("llama"), progress=False)
    two = study.run(config.replace(workers=2), tmp_path / "two", progress=False)
    assert [v["name"] for v in two.variants] == [v["name"] for v in one.variants]
    assert [(v["lr"], v["heads"]) for v in two.variants] == [(v["lr"], v["heads"]) for v in one.variants]
    assert len(two.runs) == len(one.runs) == 3 * len(config.seeds)
    for a, b in zip(one.runs, two.runs):
        assert (a["variant"], a["seed"], a["correct"]) == (b["variant"], b["seed"], b["correct"])
        assert torch.allclose(torch.tensor(a["logp"]), torch.tensor(b["logp"]), atol=1e-4)
    # the workers wrote every run; the study itself trained nothing (all its runs were read back)
    assert two.timing["reused_runs"] == len(two.variants) * (len(config.lrs) + len(config.seeds))
    assert SFTStudyResult.load(tmp_path / "two") == two
    # the workers' training and scoring seconds are the study's (summed over them), said so in the time line
    assert two.timing["workers"] == 2 and two.timing["train"] > 0 and two.timing["eval"] > 0
    assert "2 worker processes" in two.time_line() and "summed over the workers" in two.time_line()
    # the time outside training and scoring is one process's own: none with workers (it came out negative), and at
    # least 0 in one process
    assert "other" not in two.timing and one.timing["other"] >= 0 and one.timing["workers"] == 1


def _tokens(model):
    return torch.tensor([model.tokenizer("12 + 34 = 46\n7 + 8 = 15\n3 + 9 = ").input_ids])


def test_saved_trained_parameters_reload_to_the_same_outputs_and_a_damaged_file_is_one_line(tmp_path):
    """Every arm's saved run (the delta of its trained slices, full SFT's every tuned tensor, LoRA's adapters) holds
    as many values as the arm trains, and put back onto the base model gives the trained model's logits exactly; a
    truncated or foreign file is one line naming it, before the model is touched."""
    model = helpers.tiny_model("llama")
    arms = ("precise", "random", "precise_mlps", "full") + (("lora",) if HAVE_PEFT else ())
    per_rank = None
    if HAVE_PEFT:
        from circuits.models.sources import load_hf_reference
        from circuits.sft.arms import lora_per_rank
        from circuits.evaluation.study_config import LORA_TARGETS

        per_rank = lora_per_rank(load_hf_reference(helpers.tiny_dir("llama")), LORA_TARGETS)
    config = _config(arms=arms, random_draws=1, save_weights="all")
    trainer = study._Trainer(config, model, _data(model))
    tokens = _tokens(model)
    with torch.no_grad():
        untrained = model(tokens)
    for v in study.variants(config, model, KEY, (1,), per_rank):
        trained, stats = trainer.train(v, 1e-2, 0)
        with torch.no_grad():
            want = trained(tokens).clone()
        assert not torch.allclose(want, untrained, atol=1e-4), v["name"]  # (the run moved the model)
        path = tmp_path / f"{v['arm']}.pt"
        trainer.save(v, trained, 1e-2, 0, path)
        saved = torch.load(path, weights_only=True)
        assert sum(t.numel() for t in saved["tensors"].values()) == stats["tuned_parameters"], v["name"]
        trainer.restore()
        with torch.no_grad():
            assert torch.equal(model(tokens), untrained)
            got = trainer.load(v, path)(tokens)
        assert torch.equal(got, want), (v["name"], float((got - want).abs().max()))
        # a truncated file, then a foreign one: one line naming it, the in-place model left as it was
        trainer.restore()
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        with pytest.raises(ValueError, match="may be truncated") as err:
            trainer.load(v, path)
        assert str(path) in str(err.value) and "\n" not in str(err.value) and "train that run again" in str(err.value)
        from circuits.io import save_torch

        save_torch({"weights": torch.zeros(3)}, path)
        with pytest.raises(ValueError, match="not a circuits delta|not the saved LoRA adapters") as err:
            trainer.load(v, path)
        assert "\n" not in str(err.value)
        with torch.no_grad():
            assert torch.equal(model(tokens), untrained)


def test_a_new_evaluation_trains_nothing_again_and_keeps_the_old_columns(tmp_path, monkeypatch):
    """A study, then the same study with perplexity and word problems added: the second run trains no run whose
    weights it saved (only full SFT under --save-weights tuned, which keeps none, trains again), reads every old
    column's scores back unchanged, and adds the new columns with intervals and paired differences. The study's
    perplexity of the base model is lm-eval's word perplexity of the same documents through `circuits evaluate`."""
    arms = ("precise", "full") + (("lora",) if HAVE_PEFT else ())
    config = _config(arms=arms, seeds=(0, 1), lrs=(1e-3, 1e-2), n_boot=200)
    trained: list[str] = []
    real_train = study._Trainer.train

    def counting(self, variant, lr, seed):
        trained.append(variant["arm"])
        return real_train(self, variant, lr, seed)

    monkeypatch.setattr(study._Trainer, "train", counting)
    out = tmp_path / "study"
    first = study.run(config, out, model=helpers.tiny_model("llama"), progress=False)
    n_first = len(trained)
    assert n_first >= len(arms) * len(config.lrs)  # every sweep point trained once
    assert first.timing["trained_runs"] == n_first
    # the sweep's first-seed run at the chosen lr is the test's first-seed run: trained at most once per arm and lr
    assert n_first <= len(arms) * (len(config.lrs) + len(config.seeds) - 1)
    # one saved file per trained run but full SFT's (--save-weights tuned); no perplexity items, no words
    assert len(list((out / "runs").glob("train-*.pt"))) == sum(a != "full" for a in trained) and not any(first.words)

    trained.clear()
    wider = config.replace(perplexity=4, word_problems=2, word_tasks=("gsm8k", "addsub"), max_gen_toks=12)
    second = study.run(wider, out, model=helpers.tiny_model("llama"), progress=False)
    assert trained == ["full"] * len(config.seeds)  # only full SFT's test runs, whose weights were not kept
    assert second.timing["trained_runs"] == len(config.seeds)
    assert second.timing["loaded_runs"] == (len(arms) - 1) * len(config.seeds)  # the others' test runs, put back
    assert f"Runs trained: {len(config.seeds)}; put back from their saved weights to score: " \
           f"{(len(arms) - 1) * len(config.seeds)}." in second.time_line()
    n_old = len(first.items)
    assert second.items[:n_old] == first.items and set(second.items[n_old:]) == {"gsm8k", "addsub", "perplexity"}
    assert second.sweep == first.sweep
    assert {k: v[:n_old] for k, v in second.base.items()} == first.base
    for a, b in zip(first.runs, second.runs):
        assert (a["variant"], a["seed"], a["lr"], a["losses"]) == (b["variant"], b["seed"], b["lr"], b["losses"])
        assert b["correct"][:n_old] == a["correct"] and b["logp"][:n_old] == a["logp"]
    old_rows, new_rows = first.table(), second.table()
    for a, b in zip(old_rows, new_rows):
        for task in first.tasks():
            assert b["tasks"][task] == a["tasks"][task], (a["name"], task)
    for row in new_rows:
        for task in ("gsm8k", "addsub", "perplexity"):
            c = row["tasks"][task]
            assert c["low"] <= c["mean"] <= c["high"] and c["vs_base"]["low"] <= c["vs_base"]["diff"] <= \
                c["vs_base"]["high"], (row["name"], task)
            assert ("vs_precise" in c) == (row["name"] != new_rows[0]["name"])
            if "vs_precise" in c:
                assert c["vs_precise"]["low"] <= c["vs_precise"]["diff"] <= c["vs_precise"]["high"]
        assert row["tasks"]["perplexity"]["measure"] == "log_perplexity" and row["tasks"]["gsm8k"]["n"] == 2
    # perplexity against a plain computation and against circuits evaluate (lm-eval's word perplexity)
    import math

    from circuits.evaluation.tasks import evaluate

    idx = second.tasks()["perplexity"]
    nll = -sum(second.base["logp"][i] for i in idx)
    n_words = sum(second.words[i] for i in idx)
    assert math.exp(new_rows[0]["tasks"]["perplexity"]["base"]) == pytest.approx(math.exp(nll / n_words))
    peer = evaluate(helpers.tiny_model("llama"), tasks=("perplexity",), limit=4, batch_size=16)
    assert peer.tasks["perplexity"]["word_perplexity"] == pytest.approx(math.exp(nll / n_words), rel=1e-4)
    table = (out / "table.md").read_text()
    assert "perplexity (n=4)" in table and "gsm8k (n=2)" in table and "% change of perplexity" in table
    assert SFTStudyResult.load(out) == second

    # and once more: nothing new to score, nothing trains (full SFT's test runs are read back too)
    trained.clear()
    study.run(wider, out, model=helpers.tiny_model("llama"), progress=False)
    assert trained == []
