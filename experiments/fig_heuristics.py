"""Heuristic neurons of the key MLPs (Nikankin et al., ICLR 2025): the top neurons of the key MLPs read over the whole
operand grid, classified into heuristics (range, modulo, pattern, identity of the answer, or none), and each rule's
neurons knocked out together against the prompts the rule covers, the rest, and random neurons; and Nikankin et al.'s
per-prompt knockout (each correct prompt's associated heuristic neurons against as many random ones, on accuracy).

Writes ``results/fig_heuristics/`` (the job's result: ``summary.json``, ``classes.json``, ``heuristics.pt``, ...,
``figure.html``, ``knockout.html``), ``tables.md`` (every neuron's row) and ``published.json`` (the tables of
docs/results.md; experiments/_tables.py renders them, publish.py copies them).

Run: ``python experiments/fig_heuristics.py --layers 19,24,29``; ``--replot`` redraws from the saved result."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.beyond.heuristics.config import HeuristicsConfig
from circuits.beyond.heuristics.job import run
from circuits.beyond.heuristics.result import HeuristicsResult
from circuits.config import option
from circuits.patching.core.metrics import get_metric
from circuits.viz.figures import write_figure, write_figures


@dataclass(frozen=True)
class Config(HeuristicsConfig):
    out: str = option("results/fig_heuristics")


def main(config: Config, model=None) -> HeuristicsResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    result = run(config, C.repo_path(config.out), model=model)
    t(f"{len(result.neurons)} neurons classified, {len(result.knockout.get('classes', {}))} classes knocked out")
    return result


def tables(result: HeuristicsResult) -> str:
    """The class table and the knockout table, as markdown."""
    s = result.summary()
    lines = [f"{s['n_classified']} of {s['n_neurons']} top neurons classified ({s['class_counts']}); share of the top "
             f"neurons' effect they carry: {100 * s['share_carried']:.1f}%", "",
             "| neuron | END effect | classes | primary rule | match | activation where the rule holds | promotes (z) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in result.table_rows():
        lines.append(f"| {r['neuron']} | {r['effect']:+.4f} | {', '.join(r['classes'])} | {r['rule'] or '-'} | "
                     f"{r['score']:.2f} | {({1: 'highest', -1: 'lowest', 0: '-'})[r['polarity']]} | "
                     f"{'-' if r['promotion'] is None else format(r['promotion'], '+.2f')} |")
    lines += ["", "| class (rule) | neurons | covered drop [95%] | uncovered drop [95%] | random, covered | random, uncovered |",
              "| --- | --- | --- | --- | --- | --- |"]
    for name, k in s["knockout"].items():
        cells = [f"{k[x]['mean']:+.4f} [{k[x]['low']:+.4f}, {k[x]['high']:+.4f}] (n={k[x]['n']})"
                 for x in ("covered_drop", "uncovered_drop", "random_covered_drop", "random_uncovered_drop")]
        lines.append(f"| {name} | {k['n_neurons']} | " + " | ".join(cells) + " |")
    pk = published(result).get("heuristics_prompt_knockout")
    if pk:
        lines += ["", T.render(pk).rstrip("\n")]
    return "\n".join(lines) + "\n"


def published(result: HeuristicsResult) -> dict:
    """The two tables of docs/results.md this result gives: per key MLP, how much of its effect the top neurons carry
    and how much of theirs the classified ones do; and the class knockout (where it ran)."""
    effect = (result.effects * get_metric(result.metric).sign).nan_to_num(0).clamp_min(0)
    classified = set(result.classified())
    layers = {}
    for layer in sorted({n.layer for n in result.neurons}):
        idx = [i for i, n in enumerate(result.neurons) if n.layer == layer]
        layers[str(layer)] = {"n_top": len(idx), "top_effect": float(effect[idx].sum()),
                              "layer_total": result.layer_totals.get(layer, float("nan")),
                              "n_classified": sum(i in classified for i in idx),
                              "classified_effect": float(effect[[i for i in idx if i in classified]].sum())}
    data: dict = {"layers": layers}
    if result.nulls:  # the nulls of the share classified (issue 43), per layer and pooled
        groups = {"top": ([[n.layer, n.index] for n in result.neurons], [i in classified for i in range(len(result.neurons))]),
                  **{g: (v["neurons"], v["classified"]) for g, v in result.nulls.items()}}
        data["nulls"] = {g: {str(l): {"n": sum(n[0] == l for n in ns),
                                      "n_classified": sum(bool(c) for n, c in zip(ns, cs) if n[0] == l)}
                             for l in sorted({n[0] for n in ns})} for g, (ns, cs) in groups.items()}
        data["rates"] = result.classified_rates()
    tables = {"heuristics_layers": {"render": "heuristics_layers", "data": data}}
    knockout = result.summary()["knockout"]
    if knockout:
        keep = ("n_neurons", "covered_drop", "uncovered_drop", "random_covered_drop", "random_uncovered_drop",
                "covered_vs_random")
        tables["heuristics_knockout"] = {"render": "heuristics_knockout", "data": {
            "classes": {rule: {x: k[x] for x in keep} for rule, k in knockout.items()}}}
    pk = result.summary()["prompt_knockout"]
    if pk:  # Nikankin et al.'s per-prompt knockout read on accuracy (issue 43)
        raw = result.prompt_knockout
        tables["heuristics_prompt_knockout"] = {"render": "heuristics_prompt_knockout", "data": {
            "n_prompts": next(iter(pk.values()))["n_prompts"], "n_grid": len(raw["clean_correct"]),
            "prompts": raw["prompts"], "ablation": raw["ablation"], "control": raw["control"],
            "n_random": raw["n_random"], "limits": pk}}
    return tables


def plot(result: HeuristicsResult, out: Path) -> Path:
    out = Path(out)
    T.write_published(out, published(result))
    (out / "tables.md").write_text(tables(result))
    if result.knockout_figures():
        write_figures(result.knockout_figures(), out / "knockout.html")
    return write_figure(result.figure(), out / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
