"""The one readout type every engine returns, the baselines of chunks joined, and the one default metric."""

import inspect

import pytest
import torch

from circuits.patching.engines.end_sweep import SweepResult
from circuits.patching.core.metrics import DEFAULT_METRIC, Baseline, get_metric, logits_metric
from circuits.patching.core.readouts import Readouts, cat_baselines

L, H, P = 3, 4, 6


def _baseline(n: int, seed: int, rank: bool = True, custom: tuple[str, ...] = ()) -> Baseline:
    g = torch.Generator().manual_seed(seed)
    r = lambda: torch.randn(n, generator=g)  # noqa: E731
    return Baseline(answer=torch.randint(0, 100, (n,), generator=g), cf_answer=torch.randint(0, 100, (n,), generator=g),
                    logit=r() + 5, logit_diff=r(), prob=r().sigmoid(), cf_logit=r() + 3, cf_logit_diff=r(),
                    cf_prob=r().sigmoid(), custom={k: r() for k in custom},
                    answer_rank=torch.randint(0, 5, (n,), generator=g) if rank else None)


def _readouts(shape: tuple[int, ...], seed: int, custom: tuple[str, ...] = ()) -> Readouts:
    g = torch.Generator().manual_seed(seed)
    r = lambda: torch.randn(shape, generator=g)  # noqa: E731
    return Readouts(r(), r(), r(), {k: r() for k in custom})


def _sweep(seed: int = 0, custom: tuple[str, ...] = ("c",)) -> SweepResult:
    metric = logits_metric(lambda logits: logits[:, 0], name="c") if custom else None
    return SweepResult("path", _baseline(P, seed, custom=custom), _readouts((L, H, P), seed + 1, custom),
                       _readouts((L, P), seed + 2, custom), {"c": metric} if metric else {})


def test_cat_baselines_with_and_without_answer_rank():
    a, b = _baseline(2, 0), _baseline(3, 1)
    both = cat_baselines([a, b])
    for name in ("answer", "cf_answer", "logit", "logit_diff", "prob", "cf_logit", "cf_logit_diff", "cf_prob",
                 "answer_rank"):
        assert torch.equal(getattr(both, name), torch.cat([getattr(a, name), getattr(b, name)])), name
    old = _baseline(3, 2, rank=False)  # a part read from a file saved before answer_rank existed
    mixed = cat_baselines([a, old])
    assert mixed.answer_rank is None and torch.equal(mixed.logit, torch.cat([a.logit, old.logit]))
    assert cat_baselines([_baseline(2, 3, rank=False), _baseline(1, 4, rank=False)]).answer_rank is None
    one = cat_baselines([a])
    assert torch.equal(one.answer_rank, a.answer_rank) and torch.equal(one.prob, a.prob)
    c1, c2 = _baseline(2, 5, custom=("x", "y")), _baseline(2, 6, custom=("x",))
    assert set(cat_baselines([c1, c2]).custom) == {"x"}  # kept where every part has it
    with pytest.raises(ValueError, match="at least one"):
        cat_baselines([])


def test_readouts_cat_and_select_are_inverse():
    full = _readouts((L, P), 0, ("c",))
    parts = [full.select(slice(0, 2)), full.select(torch.tensor([2, 3, 4])), full.select([5])]
    back = Readouts.cat(parts)
    for r in ("logit", "logit_diff", "prob"):
        assert torch.equal(getattr(back, r), getattr(full, r))
    assert torch.equal(back.custom["c"], full.custom["c"]) and back.n_pairs == P
    assert Readouts.cat(parts, custom=[]).custom == {}
    with pytest.raises(ValueError, match="missing"):
        Readouts.cat([full, _readouts((L, P), 1)])


def test_sweep_select_and_pool_give_back_the_sweep():
    s = _sweep()
    idx = [4, 0, 0, 3]  # any order, repeats allowed (a bootstrap resample)
    sub = s.select(idx)
    assert torch.equal(sub.head_logit, s.head_logit[..., idx]) and torch.equal(sub.mlp_prob, s.mlp_prob[..., idx])
    assert torch.equal(sub.custom["c"][1], s.custom["c"][1][..., idx])
    assert torch.equal(sub.baseline.answer_rank, s.baseline.answer_rank[idx])
    pooled = SweepResult.pool([s.select(range(0, 2)), s.select(range(2, P))])
    for k, v in s.tensors().items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(pooled.tensors()[k], v), k
    for a, b in zip(pooled.scores("c").parts.values(), s.scores("c").parts.values()):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    # The bootstrap's own resampling equals the effect of a selected sweep (one resample).
    for a, b in zip(sub.scores("relative_logit").parts.values(), (get_metric("relative_logit").effect(s.heads.select(idx), s.baseline.select(idx)),
                                                    get_metric("relative_logit").effect(s.mlps.select(idx), s.baseline.select(idx)))):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_saved_sweep_keeps_its_tensor_names_and_layout():
    """sweep.pt stays readable: the names and shapes are those saved before the readouts were unified."""
    s = _sweep()
    d = s.tensors()
    assert set(d) == {"head_logit", "head_logit_diff", "head_prob", "mlp_logit", "mlp_logit_diff", "mlp_prob",
                      "baseline", "mode", "custom"}
    assert d["head_logit"].shape == (L, H, P) and d["mlp_prob"].shape == (L, P) and d["mode"] == "path"
    assert list(d["custom"]) == ["c"] and [t.shape for t in d["custom"]["c"]] == [(L, H, P), (L, P)]
    back = SweepResult.from_tensors(d)
    for k in ("head_logit", "head_logit_diff", "head_prob", "mlp_logit", "mlp_logit_diff", "mlp_prob"):
        assert torch.equal(getattr(back, k), getattr(s, k))
    assert torch.equal(back.custom["c"][0], s.custom["c"][0])
    old = {k: v for k, v in d.items() if k not in ("custom", "mode")}  # a file from before custom metrics and modes
    assert SweepResult.from_tensors(old, mode="activation").mode == "activation"
    assert SweepResult.from_tensors(old).heads.custom == {}


def test_one_default_metric_everywhere():
    """Every result type's scores() (the one reader: its rankings are read from the Scores) and metric lookup default
    to DEFAULT_METRIC, which is fraction and the default key rule's metric. Attribution and EAP-IG default to the
    metric their estimates were made with (``None``), which attribute() and eap_ig() default to DEFAULT_METRIC."""
    from circuits.identify.result import IdentifyResult
    from circuits.patching.engines.attribution import attribute
    from circuits.patching.engines.edge_sweep import EdgeSweep
    from circuits.patching.engines.neuron_sweep import NeuronSweep
    from circuits.patching.engines.position_sweep import PositionSweep
    from circuits.patching.core.ranking import DEFAULT_KEY_RULE, KeyRule
    from circuits.patching.core.readouts import MetricLookup

    assert DEFAULT_METRIC == "fraction" and KeyRule.parse(DEFAULT_KEY_RULE).metric == DEFAULT_METRIC
    assert KeyRule.parse("top3").metric == DEFAULT_METRIC
    for cls, name in [(c, "scores") for c in (SweepResult, PositionSweep, NeuronSweep, EdgeSweep, IdentifyResult)] + [
            (MetricLookup, "metric")]:
        default = inspect.signature(getattr(cls, name)).parameters["metric"].default
        assert default == DEFAULT_METRIC, f"{cls.__name__}.{name} defaults to {default!r}"
    assert inspect.signature(attribute).parameters["metric"].default == DEFAULT_METRIC
    s = _sweep(custom=())
    for a, b in zip(s.scores().parts.values(), s.scores("fraction").parts.values()):
        torch.testing.assert_close(a, b, atol=0, rtol=0, equal_nan=True)
    assert s.scores().ranked() == s.scores("fraction").ranked()
