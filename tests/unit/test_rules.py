"""Key rules and the one ranking."""

import math

import pytest
import torch

from circuits.patching.core.ranking import DEFAULT_KEY_RULE, KeyRule, rank
from circuits.types import Head


def test_parse_rules():
    assert KeyRule.parse("relative_logit<-0.05") == KeyRule("relative_logit", "<", -0.05)
    assert KeyRule.parse("fraction >= 0.05") == KeyRule("fraction", ">=", 0.05)
    assert KeyRule.parse("top10") == KeyRule("fraction", top_k=10)
    assert KeyRule.parse("top:3:prob") == KeyRule("prob", top_k=3)
    assert str(KeyRule.parse(DEFAULT_KEY_RULE)) == "fraction>=0.05"
    assert KeyRule.parse("mine>1", custom=("mine",)).metric == "mine"


@pytest.mark.parametrize("bad, message", [
    ("fraction", "Cannot read key rule"), ("top", "Cannot read key rule"), ("speed<3", "Unknown metric 'speed'"),
    ("relative_logit<<1", "Cannot read the threshold '<1'"), ("fraction>=0.0.5", "Cannot read the threshold '0.0.5'"),
    ("fraction>=nan", "finite number"), ("top0", "selects no heads"),
])
def test_bad_rules_say_what_is_accepted(bad, message):
    with pytest.raises(ValueError, match=message):
        KeyRule.parse(bad)


def test_select_threshold_and_top_k():
    effects = torch.tensor([[-0.10, 0.02], [-0.06, -0.01]])
    sel = KeyRule.parse("relative_logit<-0.05").select(effects)
    assert [idx for idx, _ in sel] == [(0, 0), (1, 0)]  # most negative first
    assert KeyRule.parse("top1:relative_logit").select(effects)[0][0] == (0, 0)
    frac = torch.tensor([[0.3, 0.01], [0.06, -0.2]])
    assert [idx for idx, _ in KeyRule.parse("fraction>=0.05").select(frac)] == [(0, 0), (1, 0)]


def test_rank_returns_every_head_and_skips_unswept():
    frac = torch.tensor([[0.3, 0.01, float("nan")], [0.06, -0.2, 0.0]])
    ranked = rank(frac, sign=1)
    assert [h for h, _ in ranked] == [Head(0, 0), Head(1, 0), Head(0, 1), Head(1, 2), Head(1, 1)]
    assert all(not math.isnan(e) for _, e in ranked)
    assert [h for h, _ in rank(frac, sign=-1)][0] == Head(1, 1)


# --- the one ranking -------------------------------------------------------------------------------


def _plain_order(values: list[float], sign: int) -> list[int]:
    """The reference: non-NaN entries by value * sign from the largest down, ties by index."""
    return sorted((i for i, v in enumerate(values) if not math.isnan(v)), key=lambda i: (-values[i] * sign, i))


TIED = [0.2, float("nan"), -0.1, 0.2, 0.0, -0.1, 0.2, float("nan"), 0.0, -0.3, 0.2, -0.1]


@pytest.mark.parametrize("sign", [1, -1])
def test_order_is_stable_with_nan_last_or_dropped(sign):
    from circuits.patching.core.ranking import order

    t = torch.tensor(TIED)
    assert order(t, sign).tolist() == _plain_order(TIED, sign)
    nans = [i for i, v in enumerate(TIED) if math.isnan(v)]
    assert order(t, sign, keep_nan=True).tolist() == _plain_order(TIED, sign) + nans
    assert order(t.reshape(3, 4), sign).tolist() == _plain_order(TIED, sign)  # flat indices of any shape
    with pytest.raises(ValueError, match="sign must be -1"):
        order(t, 0)


@pytest.mark.parametrize("sign", [1, -1])
def test_ties_order_alike_on_every_path(sign):
    """Every place that ranks components -- heads, MLPs, rules, neurons, edges, the screen, the receivers of edges,
    the bootstrap's threshold -- orders the same tied effects the same way."""
    from types import SimpleNamespace

    from circuits.beyond.edges.job import resolve_receivers
    from circuits.beyond.screen.job import ranked_neurons, ranked_nodes
    from circuits.patching.engines.neuron_sweep import top_neurons
    from circuits.patching.core.ranking import rank_mlps, ranked_entries
    from circuits.patching.core.uncertainty import rule_threshold
    from circuits.types import Component, Neuron, Receiver

    want = _plain_order(TIED, sign)
    heads = torch.tensor(TIED).reshape(3, 4)
    unravel = [divmod(i, 4) for i in want]
    assert [tuple(h) for h, _ in rank(heads, sign)] == unravel
    assert [i for i, _ in ranked_entries(heads, sign)] == unravel
    assert [i for i, _ in KeyRule(metric="fraction", top_k=5).select(heads, sign)] == unravel[:5]
    assert [l for l, _ in rank_mlps(torch.tensor(TIED), sign)] == want
    assert top_neurons(torch.tensor(TIED), sign, share=0.5) == want[:6]
    th = rule_threshold(KeyRule(metric="fraction", top_k=3), heads, sign)
    assert th == float(heads.flatten()[want[3]])  # the effect of the first one left out
    # The screen: heads [layer, head, offset] with one offset, MLPs none (NaN), neurons [layer, neuron, offset].
    nodes = ranked_nodes(heads[..., None], torch.full((3, 1), float("nan")), sign)
    assert [(c.layer, c.head) for c, _, _ in nodes] == unravel
    assert [Neuron(l, d) for l, d in unravel[:4]] == [n for n, _, _ in ranked_neurons(heads[..., None], sign, 4)]
    # Edges into a receiver: the senders in the same order.
    from circuits.patching.core.scores import Scores

    senders = [Component("head", 1 + i // 4, i % 4) for i in range(len(TIED))]
    receivers = Receiver.parse_many("9.0.q")
    edges = Scores({"edges": torch.tensor(TIED)[:, None]}, "m", sign, labels={"edges": (senders, receivers)})
    got = edges.ranked(6, into=receivers[0])
    assert [s for s, _ in got] == [senders[i] for i in want[:6]]
    # Receivers "topK" of an identify result: heads of layers >= 1 and MLPs, one ranking.
    fake = SimpleNamespace(scores=lambda m: Scores({"heads": torch.cat([torch.zeros(1, 4), heads]),
                                                    "mlps": torch.full((4,), float("nan"))}, "m", sign))
    got = list(dict.fromkeys(r.component for r in resolve_receivers("top5", fake)))  # a head: its q, k and v
    assert got == [Component("head", l + 1, h) for l, h in unravel[:5]]


def test_no_other_sign_and_sort_in_the_package():
    """ranking.order is the only argsort of effects; the few other sorts sort something else."""
    import re
    from pathlib import Path

    import circuits

    allowed = {
        "patching/core/ranking.py": "the one ranking",
        "patching/core/readouts.py": "spearman's ranks of values (ascending, ties averaged), not an importance order",
        "explain/heuristics/rules.py": "a neuron's grid cells by activation (Nikankin et al.'s top-k match), both signs",
    }
    root = Path(circuits.__file__).parent
    found = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if "argsort" in code or (re.search(r"\bsort(ed)?\(", code) and "sign" in code):
                found.setdefault(rel, []).append(n)
    assert set(found) <= set(allowed), {k: v for k, v in found.items() if k not in allowed}
    assert "patching/core/ranking.py" in found
