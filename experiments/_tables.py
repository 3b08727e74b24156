"""The tables of docs/results.md, rendered from what each experiment script saves: one source for every number.

Library-free (neither ``circuits`` nor torch): it reads plain JSON, so ``experiments/publish.py`` and the unit
test that checks docs/results.md run without a model.

- A script ends with :func:`write_published` (after its result is saved): ``published.json`` beside the result holds,
  for each table it publishes, the renderer's name and the plain JSON that renderer needs (``data``), and
  ``published.md`` the tables as rendered.
- docs/results.md holds each table between markers::

      <!-- table: fig3_knockout -->
      | k heads knocked out | 0 | 1 | ...
      <!-- /table -->

- ``python experiments/publish.py`` rewrites those blocks from ``results/**/published.json``; the unit test renders
  the committed fixtures (tests/fixtures/published/) and asserts each block equals its rendering.

A renderer takes the ``data`` a script wrote and returns the table's header and rows (strings); formatting is here,
once, so a re-run script and a fixture render the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

PUBLISHED = "published.json"
BLOCK = re.compile(r"<!-- table: (?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- /table -->", re.S)

Table = tuple[list[str], list[list[str]]]  # header, rows


def markdown(header: list[str], rows: Iterable[Iterable[Any]]) -> str:
    """A markdown table: the header, the ``---`` line, one line per row (every row as long as the header)."""
    line = lambda cells: "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"  # noqa: E731
    lines = [line(header), "|" + "|".join("---" for _ in header) + "|"]
    for i, row in enumerate(rows):
        cells = [str(c) for c in row]
        if len(cells) != len(header):
            raise ValueError(f"row {i} has {len(cells)} cells, the header {len(header)}: {cells}")
        lines.append(line(cells))
    return "\n".join(lines) + "\n"


# -- renderers: data (plain JSON a script wrote) -> (header, rows) ---------------------------------------------------

def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _head(h: list) -> str:
    return f"{h[0]}.{h[1]}"


def fig3_knockout(d: dict) -> Table:
    """Figure 3: accuracy and answer probability after knocking out the top-k heads of the effect order and of each
    random order (``random_accuracy[seed][k]``)."""
    ks, n = d["ks"], len(d["random_accuracy"])
    mean = lambda rows, i: sum(r[i] for r in rows) / len(rows)  # noqa: E731
    fmt = lambda xs: [f"{x:.2f}" for x in xs]  # noqa: E731
    idx = range(len(ks))
    return (["k heads knocked out", *map(str, ks)], [
        ["accuracy, effect-rank", *fmt(d["effect_accuracy"])],
        [f"accuracy, random-rank (mean of {n} seeds)", *fmt(mean(d["random_accuracy"], i) for i in idx)],
        ["accuracy, random-rank (worst seed)", *fmt(min(r[i] for r in d["random_accuracy"]) for i in idx)],
        ["answer prob., effect-rank", *fmt(d["effect_prob"])],
        ["answer prob., random-rank (mean)", *fmt(mean(d["random_prob"], i) for i in idx)],
    ])


IDENTIFY_COLUMNS = {"addition": "addition", "subtraction": "subtraction", "multiplication": "multiplication",
                    "division": "division", "all": "all four"}


def identify(d: dict) -> Table:
    """Figure 2 / 15 by ``circuits identify --task all``: per operation (and pooled), what the pairs and the
    counterfactual do and which heads and MLPs matter. ``d["results"][task]`` is the task's summary (its
    ``head_effects`` and ``mlp_effects`` on the paper's relative logit)."""
    tasks = [t for t in IDENTIFY_COLUMNS if t in d["results"]]
    rows: dict[str, list[str]] = {}
    for t in tasks:
        s = d["results"][t]
        b = s["baseline"]
        heads = [(li, hi, e) for li, row in enumerate(s["head_effects"]) for hi, e in enumerate(row)]
        strongest = min(heads, key=lambda x: x[2])
        mlps = sorted(enumerate(s["mlp_effects"]), key=lambda x: x[1])[:3]
        key = s["key_heads"]
        cells = {
            "accuracy before filtering (answer prob.)": f"{_pct(s['accuracy'])} ({s['mean_answer_prob']:.2f})",
            "answer logit, reference -> full counterfactual": f"{b['answer_logit']:.1f} -> "
            f"{b['counterfactual_answer_logit']:.1f} ({100 * b['full_effect_relative_logit']:+.1f}%)",
            "answer prob., reference -> counterfactual": f"{b['answer_prob']:.2f} -> {b['counterfactual_answer_prob']:.2f}",
            "counterfactual still yields the answer": _pct(s["counterfactual_accuracy"]),
            "strongest head (paper's metric)": f"{strongest[0]}.{strongest[1]} ({100 * strongest[2]:+.1f}%)",
            "heads below the paper's -5%": str(sum(e < -0.05 for _, _, e in heads)),
            f"key heads, `{d['key_rule']}` (share of {len(heads)})": f"{len(key)} ({100 * len(key) / len(heads):.1f}%)",
            "key heads, most important first": " ".join(_head(h) for h in key),
            "strongest MLPs": ", ".join([f"{mlps[0][0]} ({100 * mlps[0][1]:+.1f}%)", *(str(m) for m, _ in mlps[1:])]),
        }
        for name, cell in cells.items():
            rows.setdefault(name, []).append(cell)
    return ["", *(IDENTIFY_COLUMNS[t] for t in tasks)], [[name, *cells] for name, cells in rows.items()]


MODEL_NAMES = {"smollm2": "SmolLM2-135M", "gemma3-270m": "Gemma 3 270M"}


def fig2_addition(d: dict) -> Table:
    """Figure 2 for one operation beside the paper's: accuracy, the full counterfactual's effect, the strongest heads
    (relative answer logit, the paper's metric; and their share of the full effect) and MLPs."""
    heads = sorted(((li, hi, e, d["fraction_head_effects"][li][hi]) for li, row in enumerate(d["head_effects"])
                    for hi, e in enumerate(row)), key=lambda x: x[2])
    mlps = sorted(enumerate(d["mlp_effects"]), key=lambda x: x[1])[:5]
    return ["", "paper (LLaMA2-7B)", f"ours ({MODEL_NAMES.get(d['model'], d['model'])})"], [
        ["accuracy on candidate prompts", "82% mean answer prob.",
         f"{_pct(d['accuracy'])} accuracy, {d['mean_answer_prob']:.2f} answer prob. (before filtering)"],
        ["full counterfactual, relative answer-logit change", "-",
         f"{100 * d['baseline']['full_effect_relative_logit']:+.1f}%"],
        ["heads below the -5% cut", "< 5% of 1024", f"{sum(h[2] < -0.05 for h in heads)} of {len(heads)}"],
        ["strongest heads (relative logit; share of full effect)", "12.22 (-14%), 13.11, 14.2, 11.8 ...",
         ", ".join(f"{li}.{hi} ({100 * e:+.1f}%; {_pct(f)})" for li, hi, e, f in heads[:5])],
        ["strongest MLPs", "after layer 17, about ±10%",
         ", ".join([*(f"{m} ({100 * e:+.1f}%)" for m, e in mlps[:3]), *(str(m) for m, _ in mlps[3:])])],
    ]


FAMILIES = {"equation": "equation (`{A} + {B} =` vs `{A} @ {B} =`)", "statement": "statements",
            "question": "question-answer"}


def identify_families(d: dict) -> Table:
    """The counterfactual check per template form: the mean over a form's templates of the share of kept pairs
    whose counterfactual still yields the answer (answer probability in brackets)."""
    tasks = [t for t in IDENTIFY_COLUMNS if t in d["results"] and t != "all"]
    rows = []
    for form, label in FAMILIES.items():
        row = [label]
        for t in tasks:
            ts = [v for tid, v in d["results"][t]["per_template"].items()
                  if d["forms"].get(tid) == form and "counterfactual_accuracy" in v]
            if not ts:  # no pair of this form was kept (a small --pairs)
                row.append("-")
                continue
            acc = sum(v["counterfactual_accuracy"] for v in ts) / len(ts)
            prob = sum(v["counterfactual_answer_prob"] for v in ts) / len(ts)
            row.append(f"{_pct(acc)} ({prob:.2f})")
        rows.append(row)
    return ["family", *tasks], rows


def fig15_overlap(d: dict) -> Table:
    """Figure 15: how many of each operation's top key heads each other operation shares."""
    ops, sets = d["operations"], {op: {tuple(h) for h in d["key_heads"][op]} for op in d["operations"]}
    return ["", *ops], [[a, *(str(len(sets[a] & sets[b])) for b in ops)] for a in ops]


ROLES = {"A": ("A", "operand A"), "B": ("B", "operand B"), "operator": ("operator", "operator"),
         "answer_prefix": ("answer prefix", "answer prefix"), "few_shot": ("few-shot prefix", "few-shot examples"),
         "other": ("other", "other")}


def fig5_roles(d: dict) -> Table:
    """Figure 5: the share of END's attention each key head puts on each token role (one operation's prompts), and
    the role it attends to most."""
    rows = [[_head(h), *(f"{x:.2f}" for x in shares), ROLES.get(label, (label, label))[1]]
            for h, shares, label in zip(d["heads"], d["shares"], d["labels"])]
    return ["head", *(ROLES.get(r, (r,))[0] for r in d["roles"]), "attends most to"], rows


SFT_TASKS = {"gsm8k": "GSM8K", "addsub": "AddSub", "singleeq": "SingleEq", "svamp": "SVAMP", "mmlu": "MMLU",
             "arithmetic": "arithmetic (held out)"}


def _params(n: float) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e8 else f"{n / 1e6:.1f}M"


def sft_table(d: dict) -> Table:
    """Tables 1 / 2: accuracy (%) per model row, the change against the base row, train speed and tuned parameters.
    ``d["rows"]`` are the saved rows (``name``, ``tasks[task]["acc"]``, ``train``, ``delta``) of an SFT table."""
    tasks = [t for t in SFT_TASKS if all(t in r["tasks"] for r in d["rows"])]
    rows = []
    for r in d["rows"]:
        train, delta = r.get("train") or {}, r.get("delta") or {}
        row = [r["name"] if not train else f"+ {r['name']}",
               f"{train['samples_per_s']:.0f} sam./s" if train else "-",
               _params(train["tuned_parameters"]) if train else "-"]
        for t in tasks:
            acc = 100 * r["tasks"][t]["acc"]
            row.append(f"{acc:.1f} ({100 * delta[t]:+.1f})" if t in delta else f"{acc:.1f}")
        rows.append(row)
    return [d.get("title", "model"), "train speed", "tuned params", *(SFT_TASKS[t] for t in tasks)], rows


TRANSFER_SETS = {  # set -> (row label, the paper's before -> after)
    "svamp": ('SVAMP ("... The answer is", first answer token)', "34.7 -> 11.8 (-66%)"),
    "multi_digit": ("multi-digit (`281 + 135 = `)", "drops"),
    "decimal": ("decimals (`4.2 plus 2.5 equals to `)", "drops"),
    "time_span": ("time spans (`... from 1723 to 172`)", "drops"),
    "mmlu_humanities": ("MMLU humanities", "42.9 -> 42.6"),
}


def fig4_transfer(d: dict) -> Table:
    """Figure 4 and MMLU: accuracy on each set before and after knocking out the key heads (and the relative
    change), beside the paper's, and after knocking out as many random heads."""
    rows = []
    for name, r in d["results"].items():
        label, paper = TRANSFER_SETS.get(name, (name, "-"))
        before, after = r["accuracy_before"], r["accuracy_after"]
        rel = f" ({100 * (after - before) / before:+.0f}%)" if before else ""
        rows.append([label, paper, f"{before:.2f} -> {after:.2f}{rel}", f"{r['accuracy_random_heads']:.2f}"])
    return ["set", "paper before -> after", "ours before -> after (relative)",
            f"ours, {d['n_random_heads']} random heads"], rows


def stability(d: dict) -> Table:
    """How stable the key-head sets are: mean Jaccard overlap across seeds and across template forms, per operation,
    and how many key heads each form alone gives. ``d["per_operation"][op]``: ``mean_jaccard_seeds``,
    ``mean_jaccard_forms``, ``key_heads_per_form`` (form -> count, in ``d["forms"]``'s order)."""
    forms = d["forms"]
    rows = [[op, f"{v['mean_jaccard_seeds']:.2f}", f"{v['mean_jaccard_forms']:.2f}",
             " / ".join(str(v["key_heads_per_form"][f]) for f in forms)] for op, v in d["per_operation"].items()]
    return ["operation", "across seeds (new operands, templates, words)",
            f"across template forms ({' / '.join(forms)})", "key heads per form"], rows


KINDS = {"mean": "mean (the paper's)", "zero": "zero", "resample": "resample"}


def ablation_kinds(d: dict) -> Table:
    """Figure 3 under each ablation kind: accuracy (%) after knocking out the top-k heads of the effect order / the
    mean over the random orders, at ``d["ks"]``. ``d["curves"][op][kind]``: ``effect_accuracy`` and
    ``random_accuracy_mean``, one value per k of ``d["ks"]``."""
    rows = []
    for op, by_kind in d["curves"].items():
        for kind, c in by_kind.items():
            label = KINDS.get(kind, kind) if op == next(iter(d["curves"])) else kind
            rows.append([op, label, *(f"{100 * e:.0f} / {100 * r:.0f}"
                                      for e, r in zip(c["effect_accuracy"], c["random_accuracy_mean"]))])
    return ["operation", "ablation", *(f"k = {k}" for k in d["ks"])], rows


DATASETS = {"gsm8k": "GSM8K", "addsub": "AddSub"}


def _change(before: float, after: float) -> str:
    rel = round(100 * (after - before) / before) if before else 0
    return f"{_pct(before)} -> {_pct(after)} ({f'{rel:+d}' if rel else '0'}%)"


def table4_gsm8k(d: dict) -> Table:
    """Table 4: the key heads found on word problems beside the paper's, how many the template key heads share, and
    accuracy after knocking out either set (``d``: one dataset's saved numbers, ``key_heads`` as [layer, head])."""
    name = DATASETS.get(d["dataset"], d["dataset"])
    key, shared = d["key_heads"], d["shared_with_templates"]
    return ["", "paper (LLaMA2-7B)", f"ours ({MODEL_NAMES.get(d['model'], d['model'])})"], [
        [f"top-{len(key)} key heads on {name}", "19.6 11.8 12.22 14.31 13.11 22.25 16.0 21.17 15.26 29.5",
         " ".join(_head(h) for h in key)],
        ["shared with the template heads", "6 of 10",
         f"{len(shared)} of {len(key)}" + (f" ({' '.join(_head(h) for h in shared)})" if shared else "")],
        [f"knockout of the {name} heads, {name} accuracy", "-65%", _change(d["accuracy"], d["accuracy_knockout_own"])],
        [f"knockout of the template heads, {name} accuracy", "-",
         _change(d["accuracy"], d["accuracy_knockout_template_heads"])],
    ]


def neurons(d: dict) -> Table:
    """How concentrated each key MLP's neuron effects are (``d["shares"]["MLP19"]``: the share of neurons that carry
    50/80/90% of the summed effect, the top 1%'s part of it, the neurons' sum and the whole MLP's effect)."""
    rows = [[mlp, " / ".join(f"{100 * v[f'share_for_{p}pct']:.1f}%" for p in (50, 80, 90)), _pct(v["top1pct_of_total"]),
             f"{v['sum_of_neuron_effects']:.3f} / {v['whole_mlp_effect']:.3f}"] for mlp, v in d["shares"].items()]
    return ["MLP", "neurons for 50% / 80% / 90% of the summed effect", "top 1% of neurons carry",
            "sum of neuron effects / whole MLP"], rows


def neurons_knockout(d: dict) -> Table:
    """Accuracy (%) after knocking out the top neurons of the key MLPs, as many random ones, and the whole MLPs."""
    k = d["knockout"]
    return (["neurons knocked out (share of each MLP)", *(f"{100 * s:g}% ({n})" for s, n in zip(k["shares"], k["n_neurons"])),
             "whole MLPs"],
            [["top neurons by effect", *(f"{100 * a:.1f}" for a in k["top_accuracy"]), f"{100 * k['whole_accuracy']:.1f}"],
             ["random neurons", *(f"{100 * a:.1f}" for a in k["random_accuracy"]), ""]])


def heuristics_layers(d: dict) -> Table:
    """Per key MLP (``d["layers"]["19"]``): the top neurons' share of the layer's summed important-direction neuron
    effect (``top_effect / layer_total``), how many of them a heuristic class fits, and the share of the top neurons'
    effect those carry (``classified_effect / top_effect``); the last column pools the MLPs. Where saved (issue 43),
    the null rows: ``d["nulls"][group][layer]`` (``n``, ``n_classified``) for the top neurons and each null group, and
    ``d["rates"][group]`` the pooled share with its Wilson interval."""
    ls = d["layers"]
    n_top = {v["n_top"] for v in ls.values()}
    top = f"top-{n_top.pop()}" if len(n_top) == 1 else "top"
    total = lambda k: sum(v[k] for v in ls.values())  # noqa: E731
    return (["", *(f"MLP{l}" for l in ls), "all"], [
        [f"{top} neurons' share of the layer's summed neuron effect",
         *(_pct(v["top_effect"] / v["layer_total"]) for v in ls.values()), ""],
        [f"classified neurons of the {top.replace('-', ' ')}", *(str(v["n_classified"]) for v in ls.values()),
         f"{total('n_classified')} of {total('n_top')}"],
        [f"share of the {top.replace('-', ' ')}'s effect the classified ones carry",
         *(_pct(v["classified_effect"] / v["top_effect"]) for v in ls.values()),
         _pct(total("classified_effect") / total("top_effect"))],
        *([NULL_ROWS.get(g, g), *(f"{by[l]['n_classified']} of {by[l]['n']}" if l in by else "-" for l in ls),
           _rate(d["rates"][g])] for g, by in d.get("nulls", {}).items()),
    ])


NULL_ROWS = {"top": "classified, all top neurons (95% Wilson interval)",
             "random": "classified, as many random neurons of the same MLPs (the null)",
             "low_effect": "classified, the MLPs' lowest-effect neurons (the null)"}


def _rate(r: dict) -> str:
    p = f"; Fisher p = {r['p_vs_top']:.2g} vs the top" if "p_vs_top" in r else ""
    return f"{r['n_classified']} of {r['n']}: {_pct(r['rate'])} [{100 * r['low']:.0f}, {100 * r['high']:.0f}]{p}"


def _drop(x: dict, n: bool = True) -> str:
    return f"{x['mean']:+.3f} [{x['low']:+.3f}, {x['high']:+.3f}]" + (f" ({x['n']})" if n else "")


def heuristics_knockout(d: dict) -> Table:
    """Each heuristic class's neurons knocked out together: the drop of the first answer token's probability on the
    prompts its rule covers and on the rest (mean [95% bootstrap interval] (prompts)), and with as many random neurons
    of the same MLPs; where saved (issue 43), the covered prompts' drop minus the random neurons' (paired) at its
    Holm-corrected level over the classes, and whether it stays apart from 0 (``covered_vs_random``). ``d["classes"][rule]``: ``n_neurons``, ``covered_drop``, ``uncovered_drop``,
    ``random_covered_drop``, ``random_uncovered_drop`` (each ``mean``, ``low``, ``high``, ``n``)."""
    holm = all("covered_vs_random" in k for k in d["classes"].values()) and d["classes"]
    return (["class (rule)", "neurons", "covered prompts", "uncovered prompts", "random neurons, covered",
             "random, uncovered", *([f"covered, class minus random (Holm over {len(d['classes'])})"] if holm else [])],
            [[rule, str(k["n_neurons"]), _drop(k["covered_drop"]), _drop(k["uncovered_drop"]),
              _drop(k["random_covered_drop"], n=False), _drop(k["random_uncovered_drop"], n=False),
              *([_drop(k["covered_vs_random"], n=False) + f" at {100 * k['covered_vs_random']['level']:.2f}%: "
                 + ("apart" if k["covered_vs_random"]["holm_apart"] else "not apart")] if holm else [])]
             for rule, k in d["classes"].items()])


def heuristics_prompt_knockout(d: dict) -> Table:
    """Nikankin et al.'s per-prompt knockout (issue 43): per limit of neurons per MLP (``d["limits"][limit]``), the
    mean neurons knocked out per prompt, the accuracy before, with the prompt's associated heuristic neurons knocked
    out and with as many random ones (mean [95% bootstrap interval over prompts]), and the paired difference
    associated minus random with its 95% interval and whether it stays apart after Holm over the limits.
    ``d["n_prompts"]``, ``d["prompts"]``, ``d["ablation"]`` say what was read."""
    acc = lambda x: f"{x['mean']:.3f} [{x['low']:.3f}, {x['high']:.3f}]"  # noqa: E731
    return (["neurons per MLP (up to)", "knocked out per prompt (mean)", f"accuracy before ({d['n_prompts']} "
             f"{d['prompts']} prompts)", f"associated knocked out ({d['ablation']})", "random knocked out",
             f"associated minus random (Holm over {len(d['limits'])})"],
            [[k, f"{v['mean_ablated']:.1f}", acc(v["before"]), acc(v["associated"]), acc(v["random"]),
              f"{v['difference']['mean']:+.3f} [{v['difference']['low']:+.3f}, {v['difference']['high']:+.3f}]: "
              + ("apart" if v["difference"]["holm_apart"] else "not apart")] for k, v in d["limits"].items()])


def _period(p: float) -> str:
    return f"{p:.3g}"


KEY_KINDS = {"head": "key heads", "mlp": "key MLPs"}


def fourier_periods(d: dict) -> Table:
    """The mean share of the energy at each period over the key heads and over the key MLPs, with its bootstrap
    interval over pairs and (where saved) over the components; then (where saved, issue 43) the share white noise and
    a straight trend give each period on the same number line, and the MLPs' share minus the heads' with its interval
    over the components and whether it stays apart after Holm over the periods. ``d["by_kind"][kind]``: one share per
    period of ``d["periods"]``; ``d["by_kind_ci"][kind]``, ``d["by_kind_component_ci"][kind]``: one [low, high] per
    period; ``d["n_components"][kind]``; ``d["chance"]``, ``d["trend"]``: one share per period;
    ``d["mlp_minus_head"]``: one [difference, low, high, apart] per period."""
    comp = d.get("by_kind_component_ci", {})
    rows = []
    for kind, shares in d["by_kind"].items():
        label = KEY_KINDS.get(kind, kind)
        cells = [f"{_pct(x)} [{100 * lo:.0f}, {100 * hi:.0f}]" for x, (lo, hi) in
                 zip(shares, d["by_kind_ci"][kind], strict=True)]
        if kind in comp:
            label += f" (over pairs; over the {d['n_components'][kind]} {'heads' if kind == 'head' else 'MLPs'})"
            cells = [f"{c}; [{100 * lo:.0f}, {100 * hi:.0f}]" for c, (lo, hi) in zip(cells, comp[kind], strict=True)]
        rows.append([label, *cells])
    n = round(d["periods"][0]) if d["periods"] else 0  # the longest period is the number line's length
    if "chance" in d:
        rows.append([f"white noise on the {n} numbers (chance)", *(f"{100 * x:.1f}%" for x in d["chance"])])
    if "trend" in d:
        rows.append([f"a straight trend over 0..{n - 1}", *(f"{100 * x:.1f}%" for x in d["trend"])])
    if "mlp_minus_head" in d:
        rows.append(["key MLPs minus key heads (over the components; Holm over the periods)",
                     *(f"{100 * x:+.0f} [{100 * lo:+.0f}, {100 * hi:+.0f}] " + ("apart" if apart else "not apart")
                       for x, lo, hi, apart in d["mlp_minus_head"])])
    return ["", *(f"period {_period(p)}" for p in d["periods"])], rows


def fourier_components(d: dict) -> Table:
    """Per key component: the fewest periods that carry half its energy (largest first), the share of its (non-mean)
    energy a straight line explains, and the mean's share of its whole energy. ``d["components"][name]``: ``kind``,
    ``dominant`` (periods), ``ramp_share``, ``mean_share``."""
    return (["component", "dominant periods (fewest for half the energy)", "straight-trend share",
             "share lifting every number alike"],
            [[f"head {name}" if c["kind"] == "head" else name, ", ".join(_period(p) for p in c["dominant"]),
              _pct(c["ramp_share"]), _pct(c["mean_share"])] for name, c in d["components"].items()])


SETTINGS = {"nodes@end": "nodes at END", "nodes@all": "nodes, every position", "edges@end": "edges at END",
            "edges@all": "edges, every position"}


def _faith_groups(d: dict) -> dict[tuple[str, str, str], dict[str, dict]]:
    groups: dict[tuple[str, str, str], dict[str, dict]] = {}
    for r in d["rows"]:
        groups.setdefault((r["model"], r["operation"], r["setting"]), {})[r["ranking"]] = r
    return groups


def faithfulness(d: dict) -> Table:
    """MIB's scores of each ranking's circuits: ``CMD / CPR`` per model, operation and circuit kind (nodes at END,
    nodes at every position, edges), one column per ranking, and which ranking has the lowest CMD and by how much
    it beats the next. ``d["rows"]``: one per model, operation, setting and ranking (``cpr``, ``cmd``)."""
    rankings = d["rankings"]
    rows = []
    n_compared = sum(1 for by in d.get("margins", {}).values() for v in by.values() if len(v) >= 8 and v[5] == v[5])
    for (model, op, setting), by in _faith_groups(d).items():
        ranked = sorted((r["cmd"], name) for name, r in by.items() if r["cmd"] == r["cmd"])  # NaN: f undefined
        if not ranked:
            verdict = "undefined: m(N) = m(empty) on every pair"
        else:
            margin = f" (next: {ranked[1][1]}, +{ranked[1][0] - ranked[0][0]:.3f})" if len(ranked) > 1 else ""
            paired = d.get("margins", {}).get(f"{model}/{op}", {}).get(setting)
            if paired and len(ranked) > 1 and paired[3] == paired[3]:  # a paired bootstrap interval of the margin
                nxt, diff, lo, hi = paired[1:5]
                if len(paired) >= 8:  # Holm-corrected over the table's comparisons (issue 43)
                    level, apart = paired[6], paired[7]
                    margin = (f" (next: {nxt}, +{diff:.3f} [{lo:.3f}, {hi:.3f}] at {100 * level:.2f}%, Holm over "
                              f"{n_compared}: " + ("apart)" if apart else "not apart)"))
                else:  # saved before issue 43: a 95% interval per comparison, no correction
                    margin = (f" (next: {nxt}, +{diff:.3f} [{lo:.3f}, {hi:.3f}], 95% uncorrected"
                              + ("; the interval crosses 0)" if lo <= 0 else ")"))
            verdict = f"{ranked[0][1]}{margin}"
        rows.append([MODEL_NAMES.get(model, model), op, SETTINGS.get(setting, setting),
                     *(_faith_cell(by[k]) if k in by else "-" for k in rankings), verdict])
    return ["model", "operation", "circuit", *(f"{k} CMD / CPR" for k in rankings), "lowest CMD"], rows


def _faith_cell(r: dict) -> str:
    """``CMD [interval] / CPR``, the interval at the number's precision, then (held out) ``(gap x)``: the in-sample
    minus held-out CMD; n/a where f is undefined."""
    if r["cmd"] != r["cmd"]:
        return "n/a"
    ci = r.get("cmd_ci")
    gap = f" (gap {r['cmd_gap']:+.3f})" if r.get("cmd_gap") is not None else ""  # in-sample minus held-out CMD
    return f"{r['cmd']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "") + f" / {r['cpr']:.3f}" + gap


def faithfulness_counterfactuals(d: dict) -> Table:
    """Per model and operation, each counterfactual kind: its pairs and the share whose metric can move (the
    counterfactual prompt's top token is not the answer, so the logit difference differs between N and empty)."""
    kinds = d["kinds"]
    rows = []
    for key, by in d["shares"].items():
        model, op = key.rsplit("/", 1)
        rows.append([MODEL_NAMES.get(model, model), op, *(f"{_pct(by[k]['movable'])} of {by[k]['n_pairs']}"
                                                          if k in by else "-" for k in kinds)])
    return ["model", "operation", *(f"{k} counterfactual: pairs whose metric can move" for k in kinds)], rows


def faithfulness_seconds(d: dict) -> Table:
    """What each ranking costs per model and operation: CPU seconds of its engine alone + of measuring its curves
    (every size and circuit kind, the bootstrap included), one thread, and the same as wall-clock seconds."""
    rankings = d["rankings"]
    per: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in d["rows"]:
        cell = per.setdefault((r["model"], r["operation"]), {}).setdefault(
            r["ranking"], [r["ranking_cpu_seconds"], 0.0, r["ranking_seconds"], 0.0])
        cell[1] += r["curve_cpu_seconds"]
        cell[3] += r["curve_seconds"]
    rows = [[MODEL_NAMES.get(m, m), op, *(f"{by[k][0]:.0f} + {by[k][1]:.0f} ({by[k][2]:.0f} + {by[k][3]:.0f})"
                                          if k in by else "-" for k in rankings)] for (m, op), by in per.items()]
    return ["model", "operation", *(f"{k}: CPU s (wall s)" for k in rankings)], rows


def cells(d: dict) -> Table:
    """A table a script writes cell by cell (its own formatting): ``{"header": [...], "rows": [[...], ...]}``."""
    return list(d["header"]), [list(r) for r in d["rows"]]


RENDERERS: dict[str, Callable[[dict], Table]] = {
    "fig3_knockout": fig3_knockout, "identify": identify, "fig2_addition": fig2_addition, "identify_families": identify_families,
    "fig15_overlap": fig15_overlap, "fig5_roles": fig5_roles, "sft_table": sft_table,
    "fig4_transfer": fig4_transfer, "stability": stability, "ablation_kinds": ablation_kinds,
    "table4_gsm8k": table4_gsm8k, "neurons": neurons, "neurons_knockout": neurons_knockout, "cells": cells,
    "faithfulness": faithfulness, "faithfulness_seconds": faithfulness_seconds,
    "faithfulness_counterfactuals": faithfulness_counterfactuals,
    "heuristics_layers": heuristics_layers, "heuristics_knockout": heuristics_knockout,
    "heuristics_prompt_knockout": heuristics_prompt_knockout,
    "fourier_periods": fourier_periods, "fourier_components": fourier_components,
}


def render(table: dict) -> str:
    """The markdown of one published table: ``{"render": <a RENDERERS name>, "data": {...}}``."""
    name = table.get("render")
    if name not in RENDERERS:
        raise ValueError(f"unknown table renderer {name!r}; accepted: {', '.join(RENDERERS)}")
    return markdown(*RENDERERS[name](table["data"]))


# -- files and blocks ------------------------------------------------------------------------------------------------

def write_published(out: str | Path, tables: dict[str, dict]) -> Path:
    """Write ``published.json`` (``{table name: {"render": ..., "data": ...}}``) and ``published.md`` (each table
    rendered, under its name) into the result folder ``out``; every table is rendered first, so bad data writes
    nothing."""
    out = Path(out)
    rendered = {name: render(t) for name, t in tables.items()}
    small = _rounded(tables)
    if rendered != {name: render(t) for name, t in small.items()}:  # a number on a rounding edge: keep them all
        small = tables
    out.mkdir(parents=True, exist_ok=True)
    _write(out / PUBLISHED, json.dumps(small, ensure_ascii=False) + "\n")  # key order is row order
    _write(out / "published.md", "".join(f"<!-- table: {n} -->\n{md}<!-- /table -->\n\n" for n, md in rendered.items()))
    return out / PUBLISHED


def _rounded(x: Any) -> Any:
    """Floats to 5 significant digits (the tables show 3 at most): small files, the same tables."""
    if isinstance(x, float):
        return float(f"{x:.5g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rounded(v) for v in x]
    return x


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}-tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def read_published(path: str | Path) -> dict[str, dict]:
    """The tables of one ``published.json``; a file that is not one is a ValueError naming it."""
    try:
        tables = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable published.json ({e})") from None
    if not isinstance(tables, dict) or not all(isinstance(t, dict) and "render" in t and "data" in t
                                               for t in tables.values()):
        raise ValueError(f"{path}: accepted: {{table name: {{\"render\": ..., \"data\": ...}}}}")
    return tables


def blocks(text: str) -> dict[str, str]:
    """The marked tables of a document, by name (their markdown between the markers)."""
    found: dict[str, str] = {}
    for m in BLOCK.finditer(text):
        if m["name"] in found:
            raise ValueError(f"table {m['name']!r} is marked twice")
        found[m["name"]] = m["body"]
    opened, closed = text.count("<!-- table: "), text.count("<!-- /table -->")
    if not opened == closed == len(found):
        raise ValueError(f"{opened} table markers open and {closed} close, {len(found)} pair up; accepted: each "
                         "`<!-- table: NAME -->` line followed by its table and a `<!-- /table -->` line")
    return found


def replace_blocks(text: str, tables: dict[str, str]) -> str:
    """``text`` with each marked table named in ``tables`` replaced by its markdown; other blocks stay."""
    blocks(text)  # well-formed, or one clear error
    return BLOCK.sub(lambda m: f"<!-- table: {m['name']} -->\n{tables.get(m['name'], m['body'])}<!-- /table -->", text)
