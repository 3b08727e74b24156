"""EAP-IG (inputs variant): equal to the plain full-prompt loop of its authors' algorithm (nodes and edges, every
position and END only), equal to attribution patching with one step, edge scores summing to node scores, and the
input node converging to the exact effect of patching the whole prompt as steps grow (IG's completeness)."""

import pytest
import torch
from helpers import FAMILIES, mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.patching.engines.attribution import attribute
from circuits.patching.core.scores import Scores
from circuits.patching.engines.eap_ig import GRIDS, INPUT, LOGITS, EAPIGScores, alphas, eap_ig, eap_receivers, eap_senders, edge_mask
from circuits.patching.core.metrics import get_metric
from circuits.patching.engines.plain import eap_ig_plain
from circuits.types import Component, Receiver


def _batch(tokenizer, n=5, seed=0):
    return PairBatch.from_pairs(mixed_pairs(tokenizer, n, seed=seed), 0)


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("positions", ["all", "end"])
@pytest.mark.parametrize("metric", ["logit_diff", "fraction"])
def test_nodes_equal_plain(tiny_llama, tokenizer, metric, positions, grid):
    batch = _batch(tokenizer)
    m = get_metric(metric)
    s = eap_ig(tiny_llama, batch, m, steps=3, positions=positions, grid=grid, pairs_per_batch=2, progress=False)
    plain = eap_ig_plain(tiny_llama, batch, m, s.readout, 3, positions=positions, grid=grid)
    assert s.grid == grid and EAPIGScores.from_dict(s.to_dict()).grid == grid
    torch.testing.assert_close(s.head, plain["head"], atol=1e-5, rtol=0)
    torch.testing.assert_close(s.mlp, plain["mlp"], atol=1e-5, rtol=0)
    torch.testing.assert_close(s.input, plain["input"], atol=1e-5, rtol=0)
    assert s.head.abs().max() > 1e-3 and s.mlp.abs().max() > 1e-3  # not trivially 0
    assert s.head.shape == (tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads, len(batch))


@pytest.mark.parametrize("arch", FAMILIES)
def test_nodes_equal_plain_families(family_models, tokenizer, arch):
    model = family_models(arch)
    batch = _batch(tokenizer, 3, seed=2)
    s = eap_ig(model, batch, "logit_diff", steps=2, progress=False)
    plain = eap_ig_plain(model, batch, get_metric("logit_diff"), s.readout, 2)
    torch.testing.assert_close(s.head, plain["head"], atol=1e-5, rtol=0)
    torch.testing.assert_close(s.mlp, plain["mlp"], atol=1e-5, rtol=0)
    if not arch.startswith("gemma"):  # edges: heads that add z W_O to the residual stream
        e = eap_ig(model, batch, "logit_diff", steps=2, level="edge", progress=False)
        plain = eap_ig_plain(model, batch, get_metric("logit_diff"), s.readout, 2, level="edge")
        torch.testing.assert_close(e.edge, plain["edge"], atol=1e-5, rtol=0, equal_nan=True)


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("positions", ["all", "end"])
def test_edges_equal_plain(tiny_llama, tokenizer, positions, grid):
    """Grouped-query attention (2 K/V heads for 4 query heads) ungrouped as EAP-IG does: one k and v input per head."""
    batch = _batch(tokenizer, 4, seed=1)
    m = get_metric("logit_diff")
    s = eap_ig(tiny_llama, batch, m, steps=2, level="edge", positions=positions, grid=grid, pairs_per_batch=3,
               progress=False)
    plain = eap_ig_plain(tiny_llama, batch, m, s.readout, 2, level="edge", positions=positions, grid=grid)
    assert not s.edge.requires_grad  # scores, not a graph
    L, H = tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads
    assert s.edge is not None and s.edge.shape == (1 + L * (H + 1), L * (3 * H + 1) + 1, len(batch))
    torch.testing.assert_close(s.edge, plain["edge"], atol=1e-5, rtol=0, equal_nan=True)
    real = edge_mask(L, H)
    assert torch.isnan(s.edge[~real]).all() and not torch.isnan(s.edge[real]).any()
    assert s.edge[real].abs().max() > 1e-3
    # The flags EAP-IG needs are restored.
    assert not tiny_llama.cfg.use_split_qkv_input and not getattr(tiny_llama.cfg, "ungroup_grouped_query_attention", False)
    assert tiny_llama.cfg.n_key_value_heads == 2


def test_edges_sum_to_nodes(tiny_llama, tokenizer):
    """A sender's gradient is the sum of its receivers' input gradients: its edges add up to its node score."""
    batch = _batch(tokenizer, 4, seed=3)
    nodes = eap_ig(tiny_llama, batch, steps=2, progress=False)
    edges = eap_ig(tiny_llama, batch, steps=2, level="edge", progress=False)
    torch.testing.assert_close(edges.head, nodes.head, atol=1e-5, rtol=0)
    torch.testing.assert_close(edges.mlp, nodes.mlp, atol=1e-5, rtol=0)
    torch.testing.assert_close(edges.input, nodes.input, atol=1e-5, rtol=0)


@pytest.mark.parametrize("metric", ["logit_diff", "fraction", "prob"])
def test_one_step_is_attribution_patching(tiny_mistral, tokenizer, metric):
    batch = _batch(tokenizer, 5, seed=4)
    m = get_metric(metric)
    s = eap_ig(tiny_mistral, batch, m, steps=1, grid="right", progress=False)
    a = attribute(tiny_mistral, batch, m, neurons=False, qk_fix=False, progress=False)
    torch.testing.assert_close(s.head, a.head.nansum(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(s.mlp, a.mlp.nansum(1), atol=1e-5, rtol=0)
    end = eap_ig(tiny_mistral, batch, m, steps=1, positions="end", grid="right", progress=False)
    torch.testing.assert_close(end.head, a.head[:, :, 0], atol=1e-5, rtol=0)
    torch.testing.assert_close(s.heads, a.effect(a.head.nansum(2, keepdim=True))[:, :, 0],
                               atol=1e-5, rtol=1e-5)


def test_input_converges_to_the_exact_effect(tiny_llama, tokenizer):
    """IG's completeness: the input node's score integrates the readout's gradient along the whole path from the
    counterfactual to the reference embeddings, so it tends to readout(cf) - readout(ref) as steps grow (the
    right-endpoint sum's error shrinks like 1/steps)."""
    batch = _batch(tokenizer, 4, seed=5)
    exact = None
    errors = []
    for steps in (1, 4, 32):
        s = eap_ig(tiny_llama, batch, "logit_diff", steps=steps, progress=False)
        exact = s.baseline.cf_logit_diff - s.baseline.logit_diff
        errors.append(float((s.input - exact).abs().mean()))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.1 * float(exact.abs().mean())


def test_nodes_approach_exact_patching(tiny_llama, tokenizer):
    """Sanity (loose): with many steps the node scores agree with exact activation patching at every position
    (patching a head's output at every position with its counterfactual value)."""
    from circuits.patching.engines.plain import cf_answer_plain, readouts_of, _run_end
    from circuits.models.backend import act_name

    batch = _batch(tokenizer, 4, seed=6)
    s = eap_ig(tiny_llama, batch, "logit_diff", steps=16, progress=False)
    cf_answer = cf_answer_plain(tiny_llama, batch)
    with torch.no_grad():
        _, cf = tiny_llama.run_with_cache(batch.counterfactual)
        base = readouts_of(_run_end(tiny_llama, batch.reference, [], batch), batch.answer, cf_answer)["logit_diff"]
        exact = torch.zeros_like(s.head)
        for l in range(tiny_llama.cfg.n_layers):
            for h in range(tiny_llama.cfg.n_heads):
                def patch(z, hook, h=h):
                    z = z.clone()
                    z[:, :, h] = cf[hook.name][:, :, h]
                    return z
                out = _run_end(tiny_llama, batch.reference, [(act_name("z", l), patch)], batch)
                exact[l, h] = readouts_of(out, batch.answer, cf_answer)["logit_diff"] - base
    # Per node, integrated gradients need not beat one step on a near-linear random model (here both are within
    # ~1e-3 of the exact effects); what holds is the agreement itself, far from chance.
    assert (s.head - exact).abs().max() < 0.25 * exact.abs().max()
    corr = torch.corrcoef(torch.stack([s.head.mean(-1).flatten(), exact.mean(-1).flatten()]))[0, 1]
    assert corr > 0.8


def test_orientation_ranking_and_names(tiny_llama, tokenizer):
    batch = _batch(tokenizer, 3)
    s = eap_ig(tiny_llama, batch, "logit_diff", steps=2, level="edge", progress=False)
    assert isinstance(s, EAPIGScores) and isinstance(s, Scores) and s.metric == "logit_diff"
    L, H = tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads
    assert s.senders[0] == INPUT and s.senders[1] == Component("head", 0, 0) and s.senders[H + 1] == Component.mlp(0)
    assert s.receivers[-1] == LOGITS and s.receivers[0] == Receiver(Component("head", 0, 0), "q")
    assert s.receivers[H] == Receiver(Component("head", 0, 0), "k") and s.receivers[3 * H] == Receiver(Component.mlp(0))
    assert len(eap_senders(L, H)) == len(s.senders) and len(eap_receivers(L, H)) == len(s.receivers)
    # logit_diff: a drop is important; MIB's orientation is -effect. Read as every Scores is read.
    assert float(s.importance("input")) == pytest.approx(-float(s["input"]))
    ranked = s.ranked(part=("heads", "mlps"))
    assert len(ranked) == L * (H + 1)
    assert ranked[0][1] == pytest.approx(float(torch.cat([s.heads.flatten(), s.mlps]).min()))
    top = s.ranked(part="edges")[0]
    assert top[1] == pytest.approx(float(torch.nan_to_num(s["edges"], nan=1e9).min()))


def test_bad_input(tiny_llama, tokenizer):
    batch = _batch(tokenizer, 2)
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        eap_ig(tiny_llama, batch, steps=0, progress=False)
    with pytest.raises(ValueError, match="accepted: node, edge"):
        eap_ig(tiny_llama, batch, level="neuron", progress=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="accepted: all, end"):
        eap_ig(tiny_llama, batch, positions="first", progress=False)  # type: ignore[arg-type]
    s = eap_ig(tiny_llama, batch, "logit_diff", steps=1, progress=False)
    with pytest.raises(ValueError, match="rerun eap_ig with metric='prob'"):
        s.scores("prob")
    assert "edges" not in s.parts and s.receivers == []


def test_gemma_edges_refused(family_models, tokenizer):
    with pytest.raises(ValueError, match="Use level='node'"):
        eap_ig(family_models("gemma2"), _batch(tokenizer, 2), level="edge", progress=False)


def test_to_dict_round_trip_and_node_importance(tiny_llama, tokenizer, tmp_path):
    from circuits.io import load_torch, save_torch

    s = eap_ig(tiny_llama, _batch(tokenizer, 3), "logit_diff", steps=2, level="edge", progress=False)
    back = EAPIGScores.from_dict(load_torch(save_torch(s.to_dict(), tmp_path / "s.pt")))
    for name in ("input", "head", "mlp"):
        assert torch.equal(getattr(back, name), getattr(s, name))
    assert torch.equal(back.edge.nan_to_num(7.0), s.edge.nan_to_num(7.0))
    assert back.senders == s.senders and back.receivers == s.receivers and back.metric == s.metric
    assert torch.equal(back.heads, s.heads) and back.ranked(5) == s.ranked(5)
    assert torch.equal(s.importance("heads"), -s.heads) and torch.equal(s.importance("mlps"), -s.mlps)
    assert torch.equal(s.scores("relative_logit" if s.readout == "logit" else "logit_diff").heads, s.heads)


def test_grids():
    """MIB's pinned EAP-IG (7af394a) interpolates its edges at range(0, steps) / steps; the right grid ends at 1."""
    assert alphas(5) == [0.0, 0.2, 0.4, 0.6, 0.8]
    assert alphas(5, "right") == [0.2, 0.4, 0.6, 0.8, 1.0]
    with pytest.raises(ValueError, match="grid"):
        alphas(5, "middle")
