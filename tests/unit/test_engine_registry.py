"""Every registered engine equals its plain reference loop, as Scores, on the tiny model of every family it supports
(a new entry in :data:`circuits.patching.engines.registry.ENGINES` is tested by being added). The same cases run on the
TransformerLens 4 Bridge from ``tests/backends/test_engine_registry_backends.py``."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
import torch
from helpers import FAMILIES, check_engine_against_reference, mixed_pairs

from circuits.data.pairs import PairBatch
from circuits.patching.engines.registry import CAPABILITIES, ENGINE_NAMES, ENGINES, describe, end_engines, node_engines


@pytest.mark.parametrize("arch", FAMILIES)
@pytest.mark.parametrize("name", list(ENGINES))
def test_engine_equals_its_reference(family_models, tokenizer, name, arch):
    check_engine_against_reference(family_models(arch), tokenizer, name)


@pytest.mark.parametrize("name", list(ENGINES))
def test_engine_at_end_equals_its_reference_by_the_default_metric(tiny_llama, tokenizer, name):
    """Every engine at END (the positions it may also score) by the default metric."""
    engine = ENGINES[name]
    if "end" not in engine.positions:
        pytest.skip(f"{name} does not score END alone")
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, 3), 0)
    ours = engine.run(tiny_llama, batch, positions="end", **engine.quick)
    ref = engine.reference(tiny_llama, batch, positions="end", **engine.quick)
    assert not ours.offsets
    if "heads" in engine.parts:
        assert ours.heads.shape == (tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads)
    for part, value in ours.parts.items():
        torch.testing.assert_close(value, ref.parts[part], atol=1e-4, rtol=1e-4, equal_nan=True)


def test_the_registry_is_declared_once():
    assert tuple(ENGINES) == ENGINE_NAMES
    from circuits.beyond.faithfulness.config import RANKINGS

    assert RANKINGS == tuple(node_engines()) == tuple(n for n in ENGINE_NAMES if n not in ("neurons", "edges"))
    for e in ENGINES.values():
        assert e.supports <= set(CAPABILITIES), e.name
        assert ("all_positions" in e.supports) == ("all" in e.positions) and ("end" in e.supports) == ("end" in e.positions)
        assert e.color.startswith("#") and e.doc and e.reference_name.startswith("circuits.patching.")
    assert end_engines() == ["exact-path", "exact-activation", "positions"]
    for e in ENGINES.values():  # every "module:function" resolves to a function taking the registry's keywords
        for which in ("run", "reference"):
            fn = e.resolve(which)
            assert callable(fn) and {"metric", "positions"} <= set(inspect.signature(fn).parameters), (e.name, which)
    text = describe()
    assert all(f"{n} " in text for n in ENGINES) and text.count("reference: circuits.patching.") == len(ENGINES)


def test_positions_a_engine_does_not_score_is_refused(tiny_llama, tokenizer):
    with pytest.raises(ValueError, match="scores positions end"):
        ENGINES["exact-path"].run(tiny_llama, mixed_pairs(tokenizer, 2), positions="all")


def test_the_registry_imports_no_torch():
    """The names, colours and capabilities are data: the command line reads them before any engine is imported."""
    code = ("import sys; from circuits.patching.engines.registry import ENGINES, COLORS; assert len(ENGINES) == len(COLORS); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", ["neurons", "edges"])
def test_the_neuron_and_edge_engines_name_their_components(tiny_llama, tokenizer, name):
    s = ENGINES[name].run(tiny_llama, mixed_pairs(tokenizer, 2), metric="logit_diff", **ENGINES[name].quick)
    assert list(s.parts) == [name] and len(s.top(3)) == 3
    if name == "neurons":
        assert {n.layer for n in s.labels["neurons"]} == {1} and len(s.labels["neurons"]) == tiny_llama.cfg.d_mlp
    else:
        assert [str(r) for r in s.labels["edges"][1]] == ["1.0.q", "1.0.k", "1.0.v", "MLP1"]
