"""Edges at every position (MIB's ``evaluate_graph``; issue 43) on whichever TransformerLens line this environment
has: the executor's edge strategy, which runs each pair's shared start once, clean, into the key/value cache and
cuts edges from the first differing token on (:mod:`circuits.patching.ablation.edges`), gives the END logits of the
plain loop (:func:`~circuits.patching.ablation.edges_plain.ablate_edges_everywhere_plain`: one ``run_with_hooks``
per pair per circuit, whole prompts, every position cut) on tiny models of every family whose heads add into the
residual stream and on SmolLM2; and the claim that lets it skip the start holds in the plain loop itself: before a
pair's first difference every sender's output in any circuit's run is the clean run's, which is the counterfactual
run's, so every difference there is 0. Run under ``.venv`` (3.9) and ``.venv-tl4`` (4.3)."""

from __future__ import annotations

import pytest
import torch
from helpers import aligned_pairs, mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.patching.ablation.edges import body_start
from circuits.patching.ablation.edges_plain import _outputs, ablate_edges_everywhere_plain
from circuits.patching.ablation.executor import AblationMasks, AblationSpec, run_ablation
from circuits.patching.ablation.values import INPUT_SITE
from circuits.patching.circuit_curves import edge_receivers, edge_senders, edge_valid
from circuits.patching.core.end_layers import end_logits
from circuits.patching.core.readouts import first_difference
from circuits.models.backend import act_name

EDGE_FAMILIES = ("llama", "llama3", "mistral", "mistral_window", "qwen2", "qwen3")
DENSITIES = (0.0, 0.02, 0.3, 0.8, 1.0)  # the share of the edges each circuit cuts (0: the model; 1: nothing kept)


def _pairs(tokenizer, seed=0):
    """Few-shot pairs sharing a prefix (a long shared start) and pairs of other templates and lengths."""
    return PairBatch.from_pairs(aligned_pairs(tokenizer, 2, few_shot=True) + mixed_pairs(tokenizer, 2, seed=seed), 0)


def _cut(model, densities=DENSITIES, seed=0):
    """Random edge sets ``[set, sender, receiver]``: each cuts about ``density`` of the valid edges (not nested, so
    no set is a sub-set of the one before)."""
    valid = edge_valid(model)
    g = torch.Generator().manual_seed(seed)
    return torch.stack([valid & (torch.rand(valid.shape, generator=g) < p) for p in densities])


def _names(model, gone):
    senders, receivers = [str(s) for s in edge_senders(model)], [str(r) for r in edge_receivers(model)]
    return [(senders[i], receivers[j]) for i, j in gone.nonzero().tolist()]


def _fast(model, batch, gone, kind, memory_mb):
    L, H = model.cfg.n_layers, model.cfg.n_heads
    sites = AblationMasks(torch.zeros(len(gone), L, H, dtype=torch.bool), torch.zeros(len(gone), L, dtype=torch.bool),
                          edges=gone)
    run = run_ablation(model, batch, AblationSpec(kind, sites, "all"), memory_mb=memory_mb)
    assert run.strategy == "edges"
    return end_logits(model, run.resid.flatten(0, 1)).float().reshape(len(gone), len(batch), -1), run.cf_resid


@pytest.mark.parametrize("arch,kind", [(a, "counterfactual") for a in EDGE_FAMILIES] +
                         [("llama", "end_mean"), ("qwen2", "zero")])
def test_every_position_equals_the_plain_loop(family_models, tokenizer, arch, kind):
    """END logits of random edge sets, with the memory so small that every pass holds two rows (the cached starts
    picked per row, sets of one pair over several passes) and with the default (one pass): the plain loop's, to
    float rounding. With counterfactual values the shared starts are used (some pair starts after position 0)."""
    model = family_models(arch)
    batch = _pairs(tokenizer)
    gone = _cut(model, seed=len(arch))
    start = body_start(model, batch, kind)
    if kind == "counterfactual":
        assert model.backend.prefix_sharing() and int(start.min()) > 0  # every pair skips its shared start
        assert torch.equal(start, torch.minimum(first_difference(batch), batch.end).cpu())
    else:  # mean and zero values differ from the clean run before the first difference: whole prompts
        assert int(start.max()) == 0
    small, _ = _fast(model, batch, gone, kind, memory_mb=0.01)
    one, cf_resid = _fast(model, batch, gone, kind, memory_mb=1024)
    ablation = {"end_mean": "mean"}.get(kind, kind)
    plain = torch.stack([ablate_edges_everywhere_plain(model, batch, _names(model, g), ablation) for g in gone])
    scale = float(plain.abs().max())
    torch.testing.assert_close(small, plain, atol=2e-5 * scale, rtol=0)
    torch.testing.assert_close(one, plain, atol=2e-5 * scale, rtol=0)
    rows = torch.arange(len(batch))
    clean = model(batch.reference)[rows, batch.end].float()
    torch.testing.assert_close(one[0], clean, atol=2e-5 * scale, rtol=0)  # nothing cut: the model
    cf = model(batch.counterfactual)[rows, batch.end].float()
    torch.testing.assert_close(end_logits(model, cf_resid).float(), cf, atol=2e-5 * scale, rtol=0)
    if kind == "counterfactual":
        torch.testing.assert_close(one[-1], cf, atol=2e-5 * scale, rtol=0)  # everything cut: the counterfactual run
    assert (plain[1:-1] - plain[0]).abs().amax(-1).min() > 1e-3  # every circuit in between changes the logits


@pytest.mark.parametrize("arch", ["llama", "qwen3", "mistral_window"])
def test_no_difference_before_the_first_differing_token(family_models, tokenizer, arch):
    """The claim the strategy rests on, read from the plain loop (whole prompts, every position cut): in the run of
    any edge set with counterfactual values, every sender's output (the input node, each head's ``hook_result``, each
    MLP's output) before the pair's first differing token equals the clean run's and the counterfactual run's, so
    each difference subtracted there is 0 and every receiver there (the keys and values later positions attend to
    included) reads the clean residual; from the first difference on, the run differs (the claim is not vacuous)."""
    model = family_models(arch)
    batch = _pairs(tokenizer, seed=2)
    first = first_difference(batch).tolist()
    L = model.cfg.n_layers
    sites = [INPUT_SITE] + [act_name(s, l) for l in range(L) for s in ("result", "mlp_out")]
    ends = batch.end.tolist()
    clean = [_outputs(model, batch.reference[i, : ends[i] + 1], sites) for i in range(len(batch))]
    cf = [_outputs(model, batch.counterfactual[i, : ends[i] + 1], sites) for i in range(len(batch))]
    assert all(f > 0 for f in first)
    for gone in _cut(model, (0.3, 1.0), seed=5):
        runs: list[dict[str, torch.Tensor]] = []
        ablate_edges_everywhere_plain(model, batch, _names(model, gone), "counterfactual", outputs=runs)
        later = 0.0
        for i, run in enumerate(runs):
            f = first[i]
            for n in sites:
                torch.testing.assert_close(cf[i][n][:f], clean[i][n][:f], atol=1e-5, rtol=0, msg=n)
                torch.testing.assert_close(run[n][:f], clean[i][n][:f], atol=1e-5, rtol=0, msg=n)
                later = max(later, float((run[n][f:] - clean[i][n][f:]).abs().max()))
        assert later > 1e-2


@pytest.fixture(scope="module")
def smollm2_pairs(smollm2):
    """Three few-shot addition pairs with MIB's counterfactual (another problem; the faithfulness job's default)."""
    from circuits.data.pairs import build_pairs

    return build_pairs(smollm2, "addition", n_pairs=3, few_shot="on", counterfactual="random",
                       check_counterfactual=False, progress=False).pairs


def test_smollm2_every_position_equals_the_plain_loop(smollm2, smollm2_pairs):
    """SmolLM2 (30 layers, grouped-query attention), three pairs, three random edge sets: the executor's END logits
    are the plain loop's, and the shared starts cover most of each prompt."""
    batch = PairBatch.from_pairs(smollm2_pairs, 0)
    start = body_start(smollm2, batch, "counterfactual")
    assert bool((start > 0).all()) and float(start.sum()) > 0.5 * float((batch.end + 1).sum())
    gone = _cut(smollm2, (0.002, 0.01, 0.05), seed=7)  # of ~125k edges (the plain loop subtracts them one by one)
    fast, _ = _fast(smollm2, batch, gone, "counterfactual", memory_mb=1024)
    plain = torch.stack([ablate_edges_everywhere_plain(smollm2, batch, _names(smollm2, g), "counterfactual")
                         for g in gone])
    scale = float(plain.abs().max())
    torch.testing.assert_close(fast, plain, atol=2e-5 * scale, rtol=0)
    assert (plain[1:] - plain[0]).abs().amax(-1).min() > 1e-2
