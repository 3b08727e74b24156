"""``circuits numbers``: how the key components compute the answer's number (issue 32).

One job with two parts, because both read the same identify result (its key heads and MLPs, its pairs) and answer
one question -- what number do the key components write, and how:

1. the Fourier view (:mod:`circuits.explain.fourier`): the top ``n_heads`` heads and ``n_mlps`` MLPs of the identify
   result, their direct effect at END on every single-token number's logit, and its spectrum over the number line;
2. digit positions (:mod:`circuits.explain.digits`, addition only): the model's accuracy on ``n_problems`` two-digit
   sums after the task's few-shot prefix (greedy decoding), and, where it reaches ``digit_floor``, the top
   ``top_neurons`` neurons (by exact END effect on the identify pairs) of the top ``digit_mlps`` MLPs, each patched
   with one operand digit changed and labelled units, tens, both or none.

It lives in ``explain`` (beside the logit lens, also a reading of the key components through the unembedding)
because ``beyond`` may not import ``explain`` (docs/architecture.md)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from circuits.data.pairs import PromptPair
from circuits.explain.digits import answer_accuracy, default_prefix, digit_effects, digit_problems, sample_problems
from circuits.explain.fourier import number_spectra
from circuits.explain.numbers.config import NumbersConfig
from circuits.explain.numbers.result import NumbersResult
from circuits.identify.result import IdentifyResult
from circuits.identify.source import model_for, pairs_of, resolved, source_result
from circuits.models.backend import Model
from circuits.patching.engines.neuron_sweep import sweep_neurons
from circuits.patching.core.metrics import get_metric
from circuits.patching.core.ranking import order
from circuits.types import Component, Neuron


def few_shot_prefix(pairs: list[PromptPair]) -> str:
    """The solved examples before an equation-form pair's question (the task's few-shot prefix), else the addition
    examples written as equations."""
    eq = next((p for p in pairs if p.template_id.endswith("/0") and p.prefix_length), None)
    if eq is not None:
        return eq.reference[: eq.reference.rfind("\n") + 1]
    return default_prefix()


def numbers(model: Model, made: IdentifyResult, config: NumbersConfig, *, progress: bool = True,
            pairs: list[PromptPair] | None = None) -> NumbersResult:
    """The result of ``config`` on ``made``'s key components and ``pairs`` (default ``made``'s; not saved)."""
    start = time.perf_counter()
    pairs = list(made.pairs if pairs is None else pairs)
    if not pairs:
        raise ValueError("The identify result holds no prompt pairs (saved without them?); rerun circuits identify")
    components = [Component.of(h) for h in made.top_heads(config.n_heads)] if config.n_heads else []
    components += made.scores(None).top(config.n_mlps, "mlps", first=made.key_rule) if config.n_mlps else []
    spectra = number_spectra(model, pairs, components, config.numbers or None)
    result = NumbersResult(config, spectra)
    if not config.digits:
        result.note = "the digit-position part was not asked for (--no-digits)"
    elif config.task != "addition":
        result.note = f"the digit-position part reads two-digit sums: not run on {config.task}"
    else:
        problems = digit_problems(model.tokenizer, sample_problems(config.n_problems, config.seed),
                                  few_shot_prefix(pairs), config.seed)
        result.problems = problems.problems
        result.accuracy = answer_accuracy(model, problems)
        acc = float(result.accuracy.mean())
        if acc < config.digit_floor:
            result.note = (f"the model writes {acc:.0%} of {len(problems.problems)} two-digit sums right (greedy), under "
                           f"the floor of {config.digit_floor:.0%}: no digit circuit to read, no neuron labelled")
        else:
            m = get_metric(config.metric)
            layers = [c.layer for c in made.scores(None).top(config.digit_mlps, "mlps", first=made.key_rule)]
            sweep = sweep_neurons(model, pairs, config.mode, layers=layers, memory_mb=config.memory_mb,  # type: ignore[arg-type]
                                  prob=m.name == "prob", progress=progress)
            neurons: list[Neuron] = []
            effects: list[float] = []
            for l, e in sweep.scores(m).by_layer().items():
                for i in order(e, m.sign)[: config.top_neurons].tolist():
                    neurons.append(Neuron(l, i))
                    effects.append(float(e[i]))
            result.neurons, result.neuron_effects = neurons, effects
            result.digit_effects = digit_effects(model, problems, neurons, progress=progress)
    result.seconds = time.perf_counter() - start
    return result


def run(config: NumbersConfig, out: str | Path, *, model: Model | None = None, progress: bool = True) -> NumbersResult:
    """The ``circuits numbers`` job: the key components of ``--heads-from`` (or of an identify run made first), saved
    in ``out`` (``summary.json``, ``numbers.pt``, ``figure.html``, ``digits.html`` where neurons were labelled)."""
    config = resolved(config)
    model = model_for(config, model)
    made = source_result(config, model, progress=progress)
    result = numbers(model, made, config, progress=progress, pairs=pairs_of(config, config.task, model, made))
    result.save(out)
    return result


def printout(args: argparse.Namespace, config: NumbersConfig, r: NumbersResult, seconds: float) -> None:
    s = r.summary()
    for kind, shares in s["by_kind"].items():
        best = max(shares, key=lambda p: shares[p])
        lo, hi = s["by_kind_component_ci"][kind][best]
        print(f"  {'heads' if kind == 'head' else 'MLPs'}: the largest mean share of energy is at period {best} "
              f"({shares[best]:.0%}, [{lo:.0%}, {hi:.0%}] over the components; white noise {s['chance_shares'][best]:.0%}, "
              f"a straight trend {s['trend_shares'][best]:.0%})")
    print("  per period, share of white noise / of a straight trend on these "
          f"{len(s['numbers'])} points: " + ", ".join(f"{float(p):.3g} {s['chance_shares'][p]:.1%} / {s['trend_shares'][p]:.1%}"
                                                      for p in s["chance_shares"]))
    for p, d in s.get("mlp_minus_head", {}).items():
        if d["holm_apart"]:
            print(f"  MLPs - heads at period {float(p):.3g}: {d['difference']:+.0%} [{d['low']:+.0%}, {d['high']:+.0%}] over the "
                  "components, apart after Holm over the periods")
    if "two_digit_accuracy" in s:
        print(f"  two-digit sums: {s['two_digit_accuracy']:.0%} of {s['n_problems']} right (greedy)")
    if s.get("label_counts"):
        print("  neurons: " + ", ".join(f"{n} {lab}" for lab, n in s["label_counts"].items()))
    if r.note:
        print(f"  {r.note}")
    print(f"-> {args.out}/figure.html")
