"""Faithfulness curves and EAP-IG (issue 24) on whichever TransformerLens line this environment has (issue 23): the
batched engines equal their plain ``run_with_hooks`` loops (:mod:`circuits.patching.engines.plain`), node and edge level,
on tiny random models of several families; one EAP-IG step is attribution patching; the receivers' own inputs
(:meth:`~circuits.models.backend.Backend.split_inputs`) leave the model as it was; the study's worker processes write
the results one process of one thread writes (experiments/faithfulness.py ``--workers``). Run under ``.venv`` (3.9)
and ``.venv-tl4`` (4.3)."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import aligned_pairs, mixed_pairs, tiny_dir

from circuits.beyond.faithfulness.result import FaithfulnessResult
from circuits.data.pairs import PairBatch
from circuits.models import backend
from circuits.patching.circuit_curves import (edge_receivers, edge_senders, edge_valid, circuit_curve,
                                            metric_of)
from circuits.patching.engines.plain import ablate_edges_plain, ablate_plain, ablation_values_plain, cf_answer_plain
from circuits.patching.core.ranking import order

SIZES = (0.0, 0.1, 0.3, 0.6, 1.0)


def _pairs(tokenizer, n_mixed=2, seed=0):
    """Few-shot pairs sharing a prefix and pairs of other templates and lengths."""
    return PairBatch.from_pairs(aligned_pairs(tokenizer, 2, few_shot=True) + mixed_pairs(tokenizer, n_mixed, seed=seed),
                                0)


def _node_scores(model, seed=0, neuron_layers=()):
    g = torch.Generator().manual_seed(seed)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    return torch.rand(L, H, generator=g), torch.rand(L, generator=g), \
        {l: torch.rand(model.cfg.d_mlp, generator=g) for l in neuron_layers}


def _ablated_nodes(heads, mlps, neurons, size):
    """The nodes a circuit of ``size`` ablates, written out from the flat ranking (heads, MLPs, neurons)."""
    L, H = heads.shape
    nodes = [("head", (l, h)) for l in range(L) for h in range(H)]
    mlp_layers = [l for l in range(L) if l not in neurons]
    nodes += [("mlp", l) for l in mlp_layers]
    flat = [heads.flatten(), mlps[mlp_layers]]
    for l in sorted(neurons):
        nodes += [("neuron", (l, i)) for i in range(len(neurons[l]))]
        flat.append(neurons[l])
    kept = {nodes[i] for i in order(torch.cat(flat), +1)[: math.floor(size * len(nodes) + 0.5)].tolist()}
    gone = [n for n in nodes if n not in kept]
    ns: dict[int, list[int]] = {}
    for kind, x in gone:
        if kind == "neuron":
            ns.setdefault(x[0], []).append(x[1])
    return [x for k, x in gone if k == "head"], [x for k, x in gone if k == "mlp"], ns


def _plain_nodes(model, batch, heads, mlps, neurons, ablation, positions):
    cf_answer = cf_answer_plain(model, batch)
    values = ablation_values_plain(model, batch, ablation)
    return torch.stack([metric_of(ablate_plain(model, batch, *_ablated_nodes(heads, mlps, neurons, s), values, positions),
                                  batch.answer, cf_answer, "logit_diff") for s in SIZES])


@pytest.mark.parametrize("positions", ["end", "all"])
@pytest.mark.parametrize("ablation", ["counterfactual", "mean", "zero"])
def test_nodes_equal_the_plain_loop(family_models, tokenizer, ablation, positions):
    model = family_models("llama")  # grouped-query attention: 4 heads, 2 key/value heads
    batch = _pairs(tokenizer)
    heads, mlps, _ = _node_scores(model)
    ours = circuit_curve(model, batch, heads, mlps, sizes=SIZES, ablation=ablation, positions=positions, n_boot=10,
                        memory_mb=0.05)
    plain = _plain_nodes(model, batch, heads, mlps, {}, ablation, positions)
    torch.testing.assert_close(ours.m, plain, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m_full, plain[-1], atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m_empty, plain[0], atol=1e-5, rtol=0)
    assert (ours.m_full - ours.m_empty).abs().max() > 1e-2  # the ablation does something
    assert ours.f[0].item() == pytest.approx(0.0, abs=1e-6) and ours.f[-1].item() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("arch", ["qwen3", "gemma2", "mistral_window"])
def test_nodes_families_with_neurons(family_models, tokenizer, arch):
    """QK norm, soft-caps and post-norms, sliding windows; one MLP scored by its neurons (``hook_post``)."""
    model = family_models(arch)
    batch = _pairs(tokenizer, seed=1)
    heads, mlps, neurons = _node_scores(model, seed=2, neuron_layers=(1,))
    ours = circuit_curve(model, batch, heads, mlps, neurons=neurons, sizes=SIZES, ablation="counterfactual",
                        n_boot=0)
    plain = _plain_nodes(model, batch, heads, mlps, neurons, "counterfactual", "end")
    torch.testing.assert_close(ours.m, plain, atol=1e-5, rtol=0)
    assert (plain[0] - plain[-1]).abs().max() > 1e-2


def _edge_sets(model, scores, valid, size):
    senders, receivers = edge_senders(model), edge_receivers(model)
    edges = [(str(senders[i]), str(receivers[j])) for i, j in valid.nonzero().tolist()]
    kept = {edges[i] for i in order(scores[valid], +1)[: math.floor(size * len(edges) + 0.5)].tolist()}
    return [e for e in edges if e not in kept]


@pytest.mark.parametrize("ablation", ["counterfactual", "mean", "zero"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_edges_equal_the_plain_loop(family_models, tokenizer, arch, ablation):
    """Receivers per query head (key/value heads ungrouped; Qwen2's K/V biases repeated with them)."""
    model = family_models(arch)
    batch = _pairs(tokenizer)
    valid = edge_valid(model)
    scores = torch.rand(valid.shape, generator=torch.Generator().manual_seed(3)).masked_fill(~valid, float("nan"))
    ours = circuit_curve(model, batch, edges=scores, sizes=SIZES, ablation=ablation, n_boot=0, memory_mb=0.05)
    cf_answer = cf_answer_plain(model, batch)
    plain = torch.stack([metric_of(ablate_edges_plain(model, batch, _edge_sets(model, scores, valid, s), ablation),
                                   batch.answer, cf_answer, "logit_diff") for s in SIZES])
    torch.testing.assert_close(ours.m, plain, atol=1e-5, rtol=0)
    assert (plain[0] - plain[-1]).abs().max() > 1e-2
    # every edge kept is the model itself, read by a plain forward
    rows = torch.arange(len(batch))
    logits = model(batch.reference)[rows, batch.end].float()
    torch.testing.assert_close(ours.m_full, metric_of(logits, batch.answer, cf_answer, "logit_diff"), atol=1e-5,
                               rtol=0)


# Every family of tests/helpers.py whose heads add into the residual stream (Gemma 2/3 normalise their sum: refused)
EDGE_FAMILIES = ("llama", "llama3", "mistral", "mistral_window", "qwen2", "qwen3")


@pytest.mark.parametrize("arch,ablation", [(a, "counterfactual") for a in EDGE_FAMILIES] +
                         [("llama", "mean"), ("qwen2", "zero")])
def test_edges_at_every_position_equal_the_plain_loop(family_models, tokenizer, arch, ablation):
    """The executor's every-position edge strategy (set x pair rows, memory small enough that every pass holds one
    row of one pair, and the default budget, all in one pass) equals the plain loop (one run_with_hooks per pair per
    circuit, edge by edge); every edge kept is the model's own run, and with counterfactual values no edge kept is the
    counterfactual run's (MIB's evaluate_graph at every position); at every position is not at END."""
    from circuits.patching.ablation.edges_plain import ablate_edges_everywhere_plain

    model = family_models(arch)
    batch = _pairs(tokenizer)
    valid = edge_valid(model)
    scores = torch.rand(valid.shape, generator=torch.Generator().manual_seed(3)).masked_fill(~valid, float("nan"))
    sizes = (0.0, 0.2, 0.6, 1.0)
    ours = circuit_curve(model, batch, edges=scores, sizes=sizes, ablation=ablation, positions="all", n_boot=0,
                         memory_mb=0.01)
    one_pass = circuit_curve(model, batch, edges=scores, sizes=sizes, ablation=ablation, positions="all", n_boot=0)
    torch.testing.assert_close(one_pass.m, ours.m, atol=1e-5, rtol=0)
    cf_answer = cf_answer_plain(model, batch)
    plain = torch.stack([metric_of(ablate_edges_everywhere_plain(model, batch, _edge_sets(model, scores, valid, s),
                                                                 ablation), batch.answer, cf_answer, "logit_diff")
                         for s in sizes])
    atol = 1e-4 if ablation == "zero" else 1e-5  # zero ablation moves the logit difference by several units
    torch.testing.assert_close(ours.m, plain, atol=atol, rtol=0)
    assert (plain[0] - plain[-1]).abs().max() > 1e-2
    rows = torch.arange(len(batch))
    clean = metric_of(model(batch.reference)[rows, batch.end].float(), batch.answer, cf_answer, "logit_diff")
    torch.testing.assert_close(ours.m_full, clean, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m[-1], clean, atol=1e-5, rtol=0)  # size 1.0: every edge kept
    if ablation == "counterfactual":
        cf = metric_of(model(batch.counterfactual)[rows, batch.end].float(), batch.answer, cf_answer, "logit_diff")
        torch.testing.assert_close(ours.m_empty, cf, atol=1e-5, rtol=0)
        torch.testing.assert_close(ours.m[0], cf, atol=1e-5, rtol=0)
    at_end = circuit_curve(model, batch, edges=scores, sizes=sizes, ablation=ablation, positions="end", n_boot=0)
    assert (at_end.m[1:-1] - ours.m[1:-1]).abs().max() > 1e-3


def test_edge_faithfulness_refuses_post_norm_models_in_one_line(family_models, tokenizer):
    model = family_models("gemma2")
    valid = edge_valid(model)
    with pytest.raises(ValueError, match="normalises the sum of its heads") as err:
        circuit_curve(model, _pairs(tokenizer), edges=torch.rand(valid.shape), sizes=SIZES, n_boot=0)
    assert "\n" not in str(err.value)


def test_split_inputs_leaves_the_model_as_it_was(family_models, tokenizer):
    """Inside: one q/k/v input per query head and the same logits; after: the same model and flags."""
    model = family_models("qwen2")  # grouped-query attention with K/V biases
    tokens = _pairs(tokenizer).reference
    before = model(tokens)
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    seen = {}
    with model.backend.split_inputs(ungroup=True, attn_result=True):
        inside = model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.1.hook_{c}_input",
                                                          lambda a, hook, c=c: seen.__setitem__(c, a.shape))
                                                         for c in "qkv"])
    assert {c: s[2] for c, s in seen.items()} == {c: model.cfg.n_heads for c in "qkv"}
    torch.testing.assert_close(inside, before, atol=1e-5, rtol=0)
    torch.testing.assert_close(model(tokens), before, atol=0, rtol=0)
    assert all(torch.equal(p, params[n]) for n, p in model.named_parameters())
    assert model.backend.n_kv_heads() == 2 and not model.cfg.use_split_qkv_input


# --- EAP-IG ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("positions", ["all", "end"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_eap_ig_nodes_and_edges_equal_the_plain_loop(family_models, tokenizer, arch, positions):
    from circuits.patching.engines.eap_ig import eap_ig, edge_mask
    from circuits.patching.core.metrics import get_metric
    from circuits.patching.engines.plain import eap_ig_plain

    model = family_models(arch)
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4, seed=1), 0)
    m = get_metric("logit_diff")
    s = eap_ig(model, batch, m, steps=2, positions=positions, pairs_per_batch=3, progress=False)
    plain = eap_ig_plain(model, batch, m, s.readout, 2, positions=positions)
    for k in ("head", "mlp", "input"):
        torch.testing.assert_close(getattr(s, k), plain[k], atol=1e-5, rtol=0)
    assert s.head.abs().max() > 1e-3
    if arch == "gemma3":  # edges need heads that add z W_O to the residual stream
        return
    e = eap_ig(model, batch, m, steps=2, level="edge", positions=positions, pairs_per_batch=3, progress=False)
    plain = eap_ig_plain(model, batch, m, e.readout, 2, level="edge", positions=positions)
    torch.testing.assert_close(e.edge, plain["edge"], atol=1e-5, rtol=0, equal_nan=True)
    real = edge_mask(model.cfg.n_layers, model.cfg.n_heads)
    assert e.edge[real].abs().max() > 1e-3
    # a sender's gradient is the sum of its receivers' input gradients: edges add up to node scores
    torch.testing.assert_close(e.head, s.head, atol=1e-5, rtol=0)
    torch.testing.assert_close(e.mlp, s.mlp, atol=1e-5, rtol=0)


@pytest.mark.parametrize("metric", ["logit_diff", "fraction"])
def test_eap_ig_one_step_is_attribution_patching(family_models, tokenizer, metric):
    from circuits.patching.engines.attribution import attribute
    from circuits.patching.engines.eap_ig import eap_ig
    from circuits.patching.core.metrics import get_metric

    model = family_models("mistral")
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4, seed=4), 0)
    m = get_metric(metric)
    s = eap_ig(model, batch, m, steps=1, grid="right", progress=False)  # alpha = 1: the gradient at the reference run
    a = attribute(model, batch, m, neurons=False, qk_fix=False, progress=False)
    torch.testing.assert_close(s.head, a.head.nansum(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(s.mlp, a.mlp.nansum(1), atol=1e-5, rtol=0)
    assert s.head.abs().max() > 1e-4


@pytest.mark.skipif(backend.installed().name != "bridge", reason="a Bridge's prefix sharing depends on transformers' cache")
def test_nodes_without_prefix_sharing(family_models, tokenizer):
    """Where Hugging Face's cache does not work under the Bridge (transformers 5.24), prompts run whole: the same
    numbers."""
    model = family_models("llama")
    batch = _pairs(tokenizer)
    heads, mlps, _ = _node_scores(model, seed=5)
    shared = model.backend.prefix_sharing()
    try:
        object.__setattr__(model, "_circuits_prefix_sharing", False)
        for positions in ("end", "all"):
            ours = circuit_curve(model, batch, heads, mlps, sizes=SIZES, positions=positions, n_boot=0)
            plain = _plain_nodes(model, batch, heads, mlps, {}, "counterfactual", positions)
            torch.testing.assert_close(ours.m, plain, atol=1e-5, rtol=0)
    finally:
        object.__setattr__(model, "_circuits_prefix_sharing", shared)


def test_faithfulness_job_runs_and_agrees_with_the_engines(tmp_path, capsys):
    """``circuits faithfulness`` end to end on a tiny model folder (the Bridge under TransformerLens 4.3): EAP-IG's
    node and edge rankings and an exact sweep's, each curve the engine's on the saved scores."""
    from helpers import tiny_dir

    from circuits.cli import main as cli_main
    from circuits.models.loading import load_model
    from circuits.results import load_result

    folder, out = tiny_dir("llama"), tmp_path / "f"
    argv = ["faithfulness", "--model", str(folder), "--no-filter-correct", "--few-shot", "on", "--pairs", "3",
            "--rankings", "exact-path,eap-ig", "--sizes", "0.05,0.2,0.5", "--n-boot", "10", "--no-progress",
            "--edge-positions", "end,all", "--out", str(out)]
    assert cli_main(argv) == 0
    assert "lowest CMD" in capsys.readouterr().out
    r = load_result(out)
    assert list(r.curves["eap-ig"]) == ["nodes@end", "nodes@all", "edges@end", "edges@all"]
    model = load_model(folder, dtype="float32", device="cpu")
    assert type(model.backend) is backend.installed() and model.backend.model is model
    # found on r.pairs, scored on r.scoring_pairs (held out, issue 43): the absolute and the signed ranking's curves
    # there, the absolute one's on the ranking pairs too (in-sample)
    assert r.held_out and not {p.reference for p in r.pairs} & {p.reference for p in r.scoring_pairs}
    for name in ("exact-path", "eap-ig"):
        for positions in ("end", "all"):
            for k, pairs, curves in (("", r.scoring_pairs, r.curves), ("_signed", r.scoring_pairs, r.signed_curves),
                                     ("", r.pairs, r.in_sample_curves)):
                c = circuit_curve(model, pairs, r.scores[name]["heads" + k], r.scores[name]["mlps" + k],
                                 input=r.scores[name].get("input" + k), sizes=(0.05, 0.2, 0.5), positions=positions,
                                 n_boot=10, count=r.config.count)  # the job counts as MIB: int(s * n)
                assert torch.equal(curves[name][f"nodes@{positions}"].f, c.f)
    # MIB's node graph (issue 43): every ranking scores the input node (EAP-IG by its estimate, exact-path by path
    # patching it), which its circuits rank and count
    L, H = model.cfg.n_layers, model.cfg.n_heads
    assert "input" in r.scores["eap-ig"] and "input" in r.scores["exact-path"]
    assert r.curves["eap-ig"]["nodes@end"].n_nodes == 1 + L * (H + 1) == r.curves["exact-path"]["nodes@end"].n_nodes
    c = circuit_curve(model, r.scoring_pairs, edges=r.scores["eap-ig"]["edges"], sizes=(0.05, 0.2, 0.5), n_boot=10,
                          count=r.config.count)
    assert torch.equal(r.curves["eap-ig"]["edges@end"].f, c.f)
    c = circuit_curve(model, r.scoring_pairs, edges=r.scores["eap-ig"]["edges"], sizes=(0.05, 0.2, 0.5), n_boot=10,
                      count=r.config.count, positions="all")
    assert torch.equal(r.curves["eap-ig"]["edges@all"].f, c.f)
    assert (r.curves["eap-ig"]["nodes@end"].m_full - r.curves["eap-ig"]["nodes@end"].m_empty).abs().max() > 1e-3


def test_experiment_workers_give_one_process_s_results_and_parts(tmp_path, capsys, monkeypatch):
    """--workers 2 (spawned processes, one thread each) writes the results, parts and counterfactual shares one
    process of one thread writes (seconds aside), prints each ranking as it finishes, and refuses 0 workers in one
    line."""
    import importlib

    import _tables as T

    exp = importlib.import_module("faithfulness")
    argv = ["--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on", "--pairs", "2",
            "--operations", "addition,subtraction,division", "--rankings", "exact-path,eap-ig", "--sizes", "0.1,0.5",
            "--n-boot", "10"]
    threads = torch.get_num_threads()
    # One thread, as each worker runs (docs/speed.md: "same code, one thread per process"). cli() sets the count from
    # CIRCUITS_THREADS (conftest's: 2 on two cores), so setting torch's count alone ran this at 2 threads; on
    # TransformerLens 4.3 the bridge's eager attention goes through torch's CPU softmax backward, whose last bits
    # change with the thread count, and EAP-IG's gradients differed from the workers' by an ulp.
    try:
        with monkeypatch.context() as env:
            env.setenv("CIRCUITS_THREADS", "1")
            one = exp.cli([*argv, "--out", str(tmp_path / "one")])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    capsys.readouterr()
    two = exp.cli([*argv, "--out", str(tmp_path / "two"), "--workers", "2"])
    printed = capsys.readouterr().out
    assert "3 runs in 2 worker processes" in printed
    assert all(f" {op} {r} done (" in printed for op in ("addition", "subtraction", "division")
               for r in ("exact-path", "eap-ig"))
    slug = exp.slug(str(tiny_dir("llama")))
    for op in ("addition", "subtraction", "division"):
        a, b = (FaithfulnessResult.load(p.parent / slug / op) for p in (one, two))
        assert [p.to_dict() if hasattr(p, "to_dict") else p for p in a.pairs] == \
            [p.to_dict() if hasattr(p, "to_dict") else p for p in b.pairs]
        for ranking in a.scores:
            for part, t in a.scores[ranking].items():
                assert torch.equal(t, b.scores[ranking][part]), (op, ranking, part)
            for setting, c in a.curves[ranking].items():
                d = b.curves[ranking][setting]
                assert torch.equal(c.m, d.m) and torch.equal(c.m_full, d.m_full) and torch.equal(c.f_low, d.f_low)
                assert (c.cpr, c.cmd, c.cmd_interval) == (d.cpr, d.cmd, d.cmd_interval)
        assert sorted(p.name for p in (one.parent / slug / op / "parts").iterdir()) == \
            sorted(p.name for p in (two.parent / slug / op / "parts").iterdir())
    timing = {"ranking_seconds", "curve_seconds", "ranking_cpu_seconds", "curve_cpu_seconds"}
    ta, tb = T.read_published(one), T.read_published(two)
    assert ta["faithfulness_counterfactuals"] == tb["faithfulness_counterfactuals"]
    strip = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]  # noqa: E731
    assert strip(ta["faithfulness"]["data"]["rows"]) == strip(tb["faithfulness"]["data"]["rows"])
    assert ta["faithfulness"]["data"]["margins"] == tb["faithfulness"]["data"]["margins"]
    with pytest.raises(SystemExit):
        exp.cli([*argv, "--out", str(tmp_path / "none"), "--workers", "0"])
    assert "--workers 0: must be at least 1" in capsys.readouterr().err
