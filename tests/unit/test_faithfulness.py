"""Faithfulness curves (issue 24): the batched engine equals a plain loop that ablates one circuit at a time with
``run_with_hooks``; f(N) = 1 and f(empty) = 0; MIB's areas; bad sizes, positions and ablations are one line."""

import math

import pytest
import torch
from helpers import aligned_pairs, mixed_pairs, spy_on_strategy

from circuits.data.pairs import PairBatch
from circuits.patching.circuit_curves import MIB_SIZES, area_scores, circuit_masks, circuit_curve, metric_of
from circuits.patching.core.metrics import logits_metric
from circuits.patching.engines.plain import ablate_plain, ablation_values_plain, cf_answer_plain
from circuits.patching.core.ranking import order

SIZES = (0.0, 0.05, 0.1, 0.25, 0.5, 0.8, 1.0)


def some_pairs(tokenizer, n_mixed=3, seed=0):
    """Few-shot pairs sharing a prefix (run once by the engine) and pairs of other templates and lengths."""
    return aligned_pairs(tokenizer, 3, few_shot=True) + mixed_pairs(tokenizer, n_mixed, seed=seed)


def scores(model, seed=0, neurons=()):
    g = torch.Generator().manual_seed(seed)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    heads = torch.rand(L, H, generator=g)
    heads[0, 1] = heads[1, 2]  # a tie, broken by index
    mlps = torch.rand(L, generator=g)
    neur = {l: torch.rand(model.cfg.d_mlp, generator=g) for l in neurons}
    return heads, mlps, neur


def plain_circuit_sets(model, heads, mlps, neurons, size):
    """The nodes a circuit of ``size`` ablates, from the flat ranking (heads, MLP nodes, neurons), written out."""
    L, H = heads.shape
    nodes = [("head", (l, h)) for l in range(L) for h in range(H)]
    flat = [heads.flatten()]
    if mlps is not None:
        mlp_layers = [l for l in range(L) if l not in neurons]
        nodes += [("mlp", l) for l in mlp_layers]
        flat.append(mlps[mlp_layers])
    for l in sorted(neurons):
        nodes += [("neuron", (l, i)) for i in range(len(neurons[l]))]
        flat.append(neurons[l])
    flat = torch.cat(flat)
    k = math.floor(size * len(nodes) + 0.5)
    kept = {nodes[i] for i in order(flat, +1)[:k].tolist()}
    ablated = [n for n in nodes if n not in kept]
    hs = [x for kind, x in ablated if kind == "head"]
    ms = [x for kind, x in ablated if kind == "mlp"]
    ns: dict[int, list[int]] = {}
    for kind, x in ablated:
        if kind == "neuron":
            ns.setdefault(x[0], []).append(x[1])
    return hs, ms, ns


def plain_curve(model, batch, heads, mlps, neurons, ablation, positions, metric="logit_diff"):
    cf_answer = cf_answer_plain(model, batch)
    values = ablation_values_plain(model, batch, ablation)
    m = lambda hs, ms, ns: metric_of(ablate_plain(model, batch, hs, ms, ns, values, positions),  # noqa: E731
                                     batch.answer, cf_answer, metric)
    per_size = torch.stack([m(*plain_circuit_sets(model, heads, mlps, neurons, s)) for s in SIZES])
    full = m([], [], {})
    everything = plain_circuit_sets(model, heads, mlps, neurons, 0.0)
    return per_size, full, m(*everything)


@pytest.mark.parametrize("ablation", ["counterfactual", "mean", "zero"])
@pytest.mark.parametrize("positions", ["end", "all"])
def test_nodes_equal_the_plain_loop(tiny_llama, tokenizer, ablation, positions):
    model = tiny_llama  # GQA: 4 heads, 2 key/value heads
    batch = PairBatch.from_pairs(some_pairs(tokenizer), 0)
    heads, mlps, _ = scores(model)
    ours = circuit_curve(model, batch, heads, mlps, sizes=SIZES, ablation=ablation, positions=positions,
                        n_boot=50, memory_mb=0.02)
    per_size, full, empty = plain_curve(model, batch, heads, mlps, {}, ablation, positions)
    torch.testing.assert_close(ours.m, per_size, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m_full, full, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m_empty, empty, atol=1e-5, rtol=0)
    assert (ours.m_full - ours.m_empty).abs().max() > 1e-2  # the ablation does something
    # f(N) = 1, f(empty) = 0 by construction: sizes 1.0 and 0.0 are N and empty
    assert ours.f[SIZES.index(1.0)].item() == pytest.approx(1.0, abs=1e-6)
    assert ours.f[SIZES.index(0.0)].item() == pytest.approx(0.0, abs=1e-6)
    f = (per_size.double().mean(-1) - empty.double().mean()) / (full.double().mean() - empty.double().mean())
    torch.testing.assert_close(ours.f.double(), f, atol=1e-4, rtol=1e-4)
    assert ours.n_kept.tolist() == [math.floor(s * (3 * 4 + 3) + 0.5) for s in SIZES]


@pytest.mark.parametrize("positions", ["end", "all"])
def test_neurons_and_heads_only_equal_the_plain_loop(tiny_mistral, tokenizer, positions):
    model = tiny_mistral
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 4, seed=3), 0)
    heads, mlps, neurons = scores(model, seed=1, neurons=(1,))
    ours = circuit_curve(model, batch, heads, mlps, neurons=neurons, sizes=SIZES, positions=positions, n_boot=0)
    per_size, full, empty = plain_curve(model, batch, heads, mlps, neurons, "counterfactual", positions)
    torch.testing.assert_close(ours.m, per_size, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m_empty, empty, atol=1e-5, rtol=0)
    assert ours.n_nodes == 3 * 4 + 2 + model.cfg.d_mlp
    # heads only: MLPs are not nodes and stay in every circuit
    only = circuit_curve(model, batch, heads, None, sizes=SIZES, positions=positions, n_boot=0,
                        metric=logits_metric(lambda logits, a: logits.log_softmax(-1)[torch.arange(len(a)), a], "lp"))
    per_size, full, empty = plain_curve(model, batch, heads, None, {}, "counterfactual", positions, only_metric())
    torch.testing.assert_close(only.m, per_size, atol=1e-5, rtol=0)
    assert only.n_nodes == 12 and only.metric == "lp"


def only_metric():
    return logits_metric(lambda logits, a: logits.log_softmax(-1)[torch.arange(len(a)), a], "lp")


@pytest.mark.parametrize("positions", ["end", "all"])
@pytest.mark.parametrize("arch", ["gemma2", "gemma3", "qwen3", "mistral_window"])
def test_families(family_models, tokenizer, arch, positions):
    model = family_models(arch)
    batch = PairBatch.from_pairs(some_pairs(tokenizer, 2), 0)
    heads, mlps, neurons = scores(model, seed=2, neurons=(2,))
    ours = circuit_curve(model, batch, heads, mlps, neurons=neurons, sizes=SIZES, positions=positions, ablation="mean",
                        n_boot=0)
    per_size, _, _ = plain_curve(model, batch, heads, mlps, neurons, "mean", positions)
    torch.testing.assert_close(ours.m, per_size, atol=1e-5, rtol=0)


@pytest.mark.parametrize("ablation,positions,strategy", [
    ("counterfactual", "end", "end"), ("mean", "end", "end"), ("zero", "end", "masked"),
    ("counterfactual", "end", "masked"), ("counterfactual", "all", "counterfactual"),
    ("counterfactual", "all", "masked"), ("mean", "all", "masked")])
def test_each_strategy_of_the_executor_equals_the_plain_loop(tiny_llama, tokenizer, monkeypatch, ablation, positions,
                                                             strategy):
    """Every curve goes through the one executor (run_ablation, spied on), which picks the END-only layers at END and
    the counterfactual-in-the-same-pass route for counterfactual values at every position; each strategy, and the
    masked forward forced where another would run, equals the plain loop (one hook per site, one circuit at a
    time)."""
    from circuits.patching.circuit_curves import node_curves as nodes

    seen = spy_on_strategy(monkeypatch, nodes, strategy)
    batch = PairBatch.from_pairs(some_pairs(tokenizer), 0)
    heads, mlps, neurons = scores(tiny_llama, seed=4, neurons=(1,))
    ours = circuit_curve(tiny_llama, batch, heads, mlps, neurons=neurons, sizes=SIZES, ablation=ablation,
                         positions=positions, n_boot=0, memory_mb=0.05)
    assert seen == [strategy]
    per_size, full, empty = plain_curve(tiny_llama, batch, heads, mlps, neurons, ablation, positions)
    torch.testing.assert_close(ours.m, per_size, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m_full, full, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m_empty, empty, atol=1e-5, rtol=0)
    assert (full - empty).abs().max() > 1e-2  # the ablation does something


def test_the_faithfulness_job_runs_every_curve_through_the_executor(tmp_path, monkeypatch):
    """With the job's defaults and edges at every position too, node curves at END and at every position and the
    edge curves at END and at every position each call the executor once per curve (END-only layers at END, the counterfactual route for nodes at
    every position, the edges strategy for edges there)."""
    from helpers import tiny_dir

    from circuits.cli import main as cli_main
    from circuits.patching.ablation import executor
    from circuits.patching.circuit_curves import node_curves as nodes

    seen = []

    def spy(model, pairs, spec, **kwargs):
        out = executor.run_ablation(model, pairs, spec, **kwargs)
        seen.append((spec.positions, spec.sites.edges is not None, out.strategy))
        return out

    monkeypatch.setattr(nodes, "run_ablation", spy)
    argv = ["faithfulness", "--model", str(tiny_dir("llama")), "--no-filter-correct", "--few-shot", "on", "--pairs", "3",
            "--rankings", "exact-path,eap-ig", "--sizes", "0.05,0.5", "--n-boot", "0", "--ig-steps", "2",
            "--edge-positions", "end,all", "--no-progress", "--out", str(tmp_path / "f")]
    assert cli_main(argv) == 0
    # per ranking and circuit kind three curves (issue 43), each one executor call: the absolute and the signed
    # ranking's on the held-out pairs, the absolute one's on the ranking pairs (in-sample)
    assert seen == [("end", False, "end")] * 3 + [("all", False, "counterfactual")] * 3 + \
        [("end", False, "end")] * 3 + [("all", False, "counterfactual")] * 3 + [("end", True, "end")] * 3 + \
        [("all", True, "edges")] * 3  # edges at every position (MIB's evaluate_graph): the executor's edges strategy


def test_masks_follow_the_one_ranking():
    heads = torch.tensor([[0.5, 0.9], [0.9, 0.1]])
    mlps = torch.tensor([0.3, 0.95])
    masks = circuit_masks(heads, mlps, None, (0.0, 1 / 6, 0.5, 1.0))
    assert masks.n_kept.tolist() == [0, 1, 3, 6]
    assert masks.mlps[1].tolist() == [False, True] and not masks.heads[1].any()  # MLP1 first
    # 0.5 of 6 = 3: MLP1, then the tie 0.9 (0.1 before 1.0 by index)
    assert masks.heads[2].tolist() == [[False, True], [True, False]] and masks.mlps[2].tolist() == [False, True]
    assert masks.heads[3].all() and masks.mlps[3].all()
    # MIB counts int(size * n): 0.49 of 6 nodes is 2, not 3
    assert circuit_masks(heads, mlps, None, (0.49, 0.5), count="floor").n_kept.tolist() == [2, 3]
    assert circuit_masks(heads, mlps, None, (0.49, 0.5)).n_kept.tolist() == [3, 3]


def test_areas_are_mibs_trapezoids():
    sizes = (0.001, 0.01, 0.1, 0.5)
    f = torch.tensor([0.2, 0.5, 0.9, 1.1])
    cpr, cmd = area_scores(sizes, f)
    xs, ys = [0.001, 0.01, 0.1, 0.5, 1.0], [0.2, 0.5, 0.9, 1.1, 1.0]
    want_cpr = sum((xs[i + 1] - xs[i]) * (ys[i] + ys[i + 1]) / 2 for i in range(4))
    want_cmd = sum((xs[i + 1] - xs[i]) * (abs(1 - ys[i]) + abs(1 - ys[i + 1])) / 2 for i in range(4))
    assert float(cpr) == pytest.approx(want_cpr) and float(cmd) == pytest.approx(want_cmd)
    assert len(MIB_SIZES) == 9 and MIB_SIZES[0] == 0.001 and MIB_SIZES[-1] == 0.5


def test_bootstrap_intervals_and_round_trip(tiny_llama, tokenizer):
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 6), 0)
    heads, mlps, _ = scores(tiny_llama)
    r = circuit_curve(tiny_llama, batch, heads, mlps, n_boot=200)
    assert r.f.shape == (9,) and r.f_per_pair.shape == (9, 6) and r.m.shape == (9, 6)
    inside = (r.f_low <= r.f + 1e-6) & (r.f <= r.f_high + 1e-6)
    assert inside.all()
    assert r.cpr_interval[0] <= r.cpr <= r.cpr_interval[1] and r.cmd_interval[0] <= r.cmd <= r.cmd_interval[1]
    cpr, cmd = area_scores(MIB_SIZES, r.f.double())
    assert r.cpr == pytest.approx(float(cpr), abs=1e-6) and r.cmd == pytest.approx(float(cmd), abs=1e-6)
    back = type(r).from_dict(r.to_dict())
    assert back == r and r.seconds > 0


@pytest.mark.parametrize(("kw", "match"), [
    ({"sizes": (0.1, 1.5)}, "size 1.5 is outside"),
    ({"sizes": ()}, "no sizes"),
    ({"sizes": ("a",)}, "accepted: a list of fractions"),
    ({"positions": "start"}, "Unknown positions 'start'; accepted: end, all"),
    ({"ablation": "resample"}, "Unknown ablation 'resample'; accepted: counterfactual, mean, zero"),
    ({"metric": "fraction"}, "Unknown metric 'fraction'; accepted: logit_diff, logit, prob"),
    ({"count": "ceil"}, "Unknown count 'ceil'; accepted: round, floor"),
])
def test_bad_input_is_one_line(tiny_llama, tokenizer, kw, match):
    heads, mlps, _ = scores(tiny_llama)
    with pytest.raises(ValueError, match=match) as e:
        circuit_curve(tiny_llama, mixed_pairs(tokenizer, 2), heads, mlps, **kw)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"\[layer, head\] = \[3, 4\]"):
        circuit_curve(tiny_llama, mixed_pairs(tokenizer, 2), heads[:2], mlps)
    with pytest.raises(ValueError, match="NaN"):
        circuit_curve(tiny_llama, mixed_pairs(tokenizer, 2), heads.clone().fill_(float("nan")), mlps)


def edge_scores(model, seed=0):
    from circuits.patching.circuit_curves import edge_valid

    valid = edge_valid(model)
    s = torch.rand(valid.shape, generator=torch.Generator().manual_seed(seed))
    return s.masked_fill(~valid, float("nan")), valid


def plain_edge_sets(model, scores, valid, size):
    from circuits.patching.circuit_curves import edge_receivers, edge_senders

    senders, receivers = edge_senders(model), edge_receivers(model)
    edges = [(str(senders[i]), str(receivers[j])) for i, j in valid.nonzero().tolist()]
    flat = scores[valid]
    k = math.floor(size * len(edges) + 0.5)
    kept = {edges[i] for i in order(flat, +1)[:k].tolist()}
    return [e for e in edges if e not in kept]


@pytest.mark.parametrize("ablation", ["counterfactual", "mean", "zero"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_edges_equal_the_plain_loop(family_models, tokenizer, ablation, arch):
    from circuits.patching.circuit_curves import circuit_curve
    from circuits.patching.engines.plain import ablate_edges_plain

    model = family_models(arch)  # GQA: 4 heads, 2 key/value heads
    batch = PairBatch.from_pairs(some_pairs(tokenizer, 2), 0)
    scores_, valid = edge_scores(model)
    ours = circuit_curve(model, batch, edges=scores_, sizes=SIZES, ablation=ablation, n_boot=20, memory_mb=0.05)
    cf_answer = cf_answer_plain(model, batch)
    m = lambda ablated: metric_of(ablate_edges_plain(model, batch, ablated, ablation),  # noqa: E731
                                  batch.answer, cf_answer, "logit_diff")
    plain = torch.stack([m(plain_edge_sets(model, scores_, valid, s)) for s in SIZES])
    torch.testing.assert_close(ours.m, plain, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m_full, m([]), atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.m_empty, plain[0], atol=1e-5, rtol=0)
    assert (ours.m_full - ours.m_empty).abs().max() > 1e-2
    assert ours.n_nodes == int(valid.sum()) and ours.level == "edge"
    assert ours.f[0].item() == pytest.approx(0.0, abs=1e-6) and ours.f[-1].item() == pytest.approx(1.0, abs=1e-6)
    # every edge kept is the unablated model: the reference run's END logit difference
    ref = ablate_plain(model, batch, [], [], {}, None, "end")
    torch.testing.assert_close(ours.m_full, metric_of(ref, batch.answer, cf_answer, "logit_diff"), atol=1e-5, rtol=0)


def test_edges_bad_input_is_one_line(family_models, tokenizer):
    from circuits.patching.circuit_curves import circuit_curve

    model = family_models("llama")
    scores_, _ = edge_scores(model)
    pairs = mixed_pairs(tokenizer, 2)
    from circuits.patching.ablation.executor import AblationMasks, AblationSpec, run_ablation

    L, H = model.cfg.n_layers, model.cfg.n_heads
    sites = AblationMasks(torch.zeros(1, L, H, dtype=torch.bool), torch.zeros(1, L, dtype=torch.bool),
                          edges=torch.ones(1, *scores_.shape, dtype=torch.bool))
    with pytest.raises(ValueError, match="strategy='masked' is for nodes"):  # edges at every position: one strategy
        run_ablation(model, PairBatch.from_pairs(pairs, 0), AblationSpec("counterfactual", sites, "all"),
                     strategy="masked")
    with pytest.raises(ValueError, match=r"\[sender, receiver\] = \[16, 40\]"):
        circuit_curve(model, pairs, edges=scores_[:3])
    for positions in ("end", "all"):
        with pytest.raises(ValueError, match="ln1_post"):
            circuit_curve(family_models("gemma2"), pairs, edges=scores_, positions=positions)
