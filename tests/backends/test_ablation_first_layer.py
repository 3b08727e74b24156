"""The ablation executor starts each set's rows at the first layer the set ablates (issue 44): with a clean prefix
(template means over prompts that share each pair's few-shot prefix), the layers before a set's first ablated layer
are the clean run's, so the executor takes the clean residual stream there and runs the rest block by block. On
each family and whichever TransformerLens line this environment has, that equals every row through every layer
(``start_at_first_layer=False``) and TransformerLens's own forward with one hook per site over the whole prompt, and
the blocks it runs are fewer: exactly the layers from each set's first; pairs of several prefix lengths in one pass
(their caches left-padded) give the same numbers."""

from __future__ import annotations

import pytest
import torch
from helpers import mixed_pairs

from circuits.models.backend import act_name
from circuits.patching.ablation.executor import AblationMasks, _from_first_layers, ablated_residuals, first_ablated_layers
from circuits.patching.ablation.values import compute_means


def _sets(L: int) -> tuple[list, dict[int, list[int]] | None]:
    """Sets whose first ablated layers are every layer, and one that ablates nothing."""
    sets = [([], []), ([(L - 1, 1)], []), ([], [L - 1]), ([(0, 0), (L - 1, 2)], [1 % L]), ([(1 % L, 3)], [])]
    return sets, {L - 1: [3, 7]}


def _plain(model, pair, means, heads, mlps, neurons) -> torch.Tensor:
    """TransformerLens's forward over the whole reference prompt, one hook per site writing the pair's group means."""
    src, T = means.source_of(pair), len(pair.reference_token_ids)
    hooks = []
    for l, h in heads:
        def z(x, hook, l=l, h=h):
            x[0, :, h] = means.table("z", l)[src, :T, h]
            return x
        hooks.append((act_name("z", l), z))
    for l in mlps:
        hooks.append((act_name("mlp_out", l), lambda x, hook, l=l: means.table("mlp_out", l)[src, :T][None].clone()))
    for l, idx in (neurons or {}).items():
        def post(x, hook, l=l, idx=idx):
            x[0, :, idx] = means.table("post", l)[src, :T][:, idx]
            return x
        hooks.append((act_name("post", l), post))
    return model.run_with_hooks(torch.tensor([pair.reference_token_ids]), fwd_hooks=hooks,
                                stop_at_layer=model.cfg.n_layers)[0, -1]


@pytest.mark.parametrize("at_end", [False, True])
@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma3"])
def test_sets_start_at_their_first_ablated_layer(family_models, tokenizer, arch, at_end, monkeypatch):
    model = family_models(arch)
    L = model.cfg.n_layers
    pairs = mixed_pairs(tokenizer, 5, seed=2)
    sets, neurons = _sets(L)
    means = compute_means(model, pairs, neuron_layers=sorted(neurons), progress=False)
    assert all(means.clean_start(p) >= p.prefix_length > 0 for p in pairs)  # the prefix is the clean run's
    masks = AblationMasks.of_sets(model, sets, [neurons if s == 3 else {} for s in range(len(sets))])
    first = first_ablated_layers(masks, L)
    assert first.tolist() == [L, L - 1, L - 1, 0, 1 % L]
    tokens = [p.reference_token_ids for p in pairs]
    args = (model, tokens, masks, means, [means.source_of(p) for p in pairs])
    kw = dict(prefix_lengths=[p.prefix_length for p in pairs], ablate_prefix=False, at_end=at_end)

    cls = type(model.backend)
    runner, widths = cls.block_runner, []

    def counting_runner(self, *a):
        run = runner(self, *a)

        def counting(layer, x):
            widths.append((layer, len(x)))
            return run(layer, x)
        return counting

    monkeypatch.setattr(cls, "block_runner", counting_runner)
    fast = ablated_residuals(*args, **kw, rows_per_batch=64)
    rows = sum(len(pairs) * (L - int(f)) for f in first)  # each set's rows from its first layer on, every pair
    assert sum(n for _, n in widths) == rows
    assert rows < len(sets) * L * len(pairs)
    full = ablated_residuals(*args, **kw, start_at_first_layer=False)
    assert (fast - full).abs().max() < 1e-5
    assert (ablated_residuals(*args, **kw, rows_per_batch=2) - full).abs().max() < 1e-5  # one set a pass
    # Pairs of several prefix and body lengths in one pass (the executor groups by body length, where templates
    # usually tie the two): the caches left-padded and masked, the bodies right-padded.
    assert len({p.prefix_length for p in pairs}) > 1 and len({len(t) - p.prefix_length for t, p in zip(tokens, pairs)}) > 1
    mixed = _from_first_layers(model, tokens, [p.prefix_length for p in pairs], masks, means,
                               torch.as_tensor([means.source_of(p) for p in pairs]), at_end, 64)
    assert (mixed - full).abs().max() < 1e-5
    for s, (heads, mlps) in enumerate(sets):
        for i, p in enumerate(pairs):
            if at_end:
                continue  # the whole-prompt hooks above ablate every position; full == fast covers END-only
            plain = _plain(model, p, means, heads, mlps, neurons if s == 3 else None)
            assert (fast[s, i] - plain).abs().max() < 1e-4, (s, i)
    assert (fast[3] - fast[0]).abs().max() > 1e-3  # the sets really differ
