"""The report's sections, one per step of the method, each drawing typed results (no model is run).

Every renderer takes the page and the :class:`Found` results of its kinds and returns the section's HTML: a
sentence saying what it shows, the figure (the same functions the experiment scripts use), and the config
that made it.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from circuits import jobs
from circuits.results import Result
from circuits.viz import analysis_sections as A
from circuits.viz.page import Page, _e, _pct, config_block, parse_views, table, validity_banner

OPERATION_ORDER = ("addition", "subtraction", "multiplication", "division", "all")


@dataclass(frozen=True)
class Found:
    """One saved result and where it lies."""

    result: Result
    path: Path
    label: str = ""  # what tells it from the other results of its kind and task in the inputs (run_labels)

    @property
    def kind(self) -> str:
        return self.result.kind

    @property
    def config(self) -> dict[str, Any]:
        return self.result.config_json()

    def config_html(self) -> str:
        return config_block(self.path, self.config, self.result.provenance, used_pairs(self.result))


def used_pairs(result: Result) -> dict[str, Any]:
    """What a result's pairs were, read from the result (issue 40: the made-by line said ``n_pairs=64``, the flag's
    cap, for a run on a file of 6): how many it holds or was measured on, and the pairs file read (its hash and lines
    read, where the result kept them)."""
    pairs = getattr(result, "pairs", None)
    n = len(pairs) if isinstance(pairs, (list, tuple)) and pairs else getattr(result, "n_pairs", None)
    out: dict[str, Any] = {"n_pairs": n} if isinstance(n, int) and not isinstance(n, bool) and n > 0 else {}
    read = (getattr(result, "pair_stats", None) or {}).get("pairs_file") or (result.provenance or {}).get("pairs_file")
    if isinstance(read, dict):
        out["pairs_file"] = read
    return out


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = json.dumps(v, sort_keys=True, default=str) if isinstance(v, (list, tuple)) else v
    return out


def _task_of(f: Found) -> str:
    return str(getattr(f.result, "task", "") or f.config.get("task", ""))


def run_labels(found: list[Found]) -> list[Found]:
    """``found`` with a label on each result that shares its kind and task with another: the config fields and the
    provenance (backend, library versions, commit) that differ between them (``seed=1``, ``backend=bridge,
    transformer_lens=4.3.0``); the folder's name when nothing recorded differs. Results alone of their kind and task
    get no label."""
    groups: dict[tuple[str, str], list[Found]] = {}
    for f in found:
        groups.setdefault((f.kind, _task_of(f)), []).append(f)
    labels: dict[int, str] = {}
    for group in groups.values():
        if len(group) < 2:
            continue
        flats = [{**_flat(f.config), **{f"made_by.{k}": v for k, v in (f.result.provenance or {}).items()
                                        if k != "dirty"}} for f in group]
        keys = sorted({k for fl in flats for k in fl if len({json.dumps(x.get(k), default=str) for x in flats}) > 1})
        keys = [k for k in keys if k.rsplit(".", 1)[-1] not in ("out", "heads_from", "identify_dir", "pairs_from")] or []
        for f, fl in zip(group, flats):
            shown = ", ".join(f"{k.removeprefix('made_by.')}={str(fl.get(k))[:24]}" for k in keys[:4])
            labels[id(f)] = (shown + (", ..." if len(keys) > 4 else "")) if keys else f.path.name
    return [dataclasses.replace(f, label=labels.get(id(f), "")) for f in found]


def _top_label(f: Found, k: int) -> str:
    """"top k heads by <metric>" for a result whose heads are an identify run's top k (key heads first), read from
    the key rule its config records; never "key heads", which only the rule's own selection is."""
    return _top_label_of(f.config.get("key_rule"), k)


def _top_label_of(rule: Any, k: int) -> str:
    from circuits.types import top_heads_label

    return top_heads_label(k, rule) if isinstance(rule, str) and rule else f"top {k} heads"


def _heads(hs) -> str:
    return ", ".join(f"{h[0]}.{h[1]}" for h in hs)


def op_rank(f: Found) -> tuple[int, str]:
    task = getattr(f.result, "task", "") or f.config.get("task", "")
    return (OPERATION_ORDER.index(task) if task in OPERATION_ORDER else len(OPERATION_ORDER), str(f.path))


def key_heads_section(page: Page, found: list[Found]) -> str:
    from circuits.viz.figures import heatmap_grid

    out = ["<p class='what'>Each heatmap shows, for every attention head (layer &times; head) and every MLP, how much "
           "patching its output at the END position with its output on the counterfactual prompt changes the answer "
           "(the paper's Figure 2), in the metric of the key rule, named on the colour bar. <b>Red is important</b> in "
           "every figure of this report, whichever the metric's sign (for <code>fraction</code>, the share of the "
           "whole counterfactual change a head carries, red is a large positive share; for the paper's "
           "<code>relative_logit</code>, a drop of the answer logit). Boxed cells are the key heads chosen by the key "
           "rule, so every boxed cell is red. Hover a cell to read its layer, head and effect.</p>"]
    identify = sorted((f for f in found if f.kind == "identify"), key=op_rank)
    doubts = [(f, f.result.validity()) for f in identify if f.result.validity().lines()]
    if doubts:  # above every figure: what a reader must know before trusting the key heads below
        out.insert(0, "<div class='note validity'><b>Results that may not be trusted</b> (thresholds: docs/identify.md, "
                      "\"Can this result be trusted?\")<ul>" + "".join(
                          f"<li><b>{_e((f.result.task or f.path.name) + (f' ({f.label})' if f.label else ''))}</b>"
                          f"{' (saved with --force)' if v.forced and v.refusals else ''}: "
                          f"{_e('; '.join(v.lines()))}</li>" for f, v in doubts) + "</ul></div>")
    for f in identify:
        r = f.result
        s = r.summary()
        keys = r.key_heads()
        listed = ", ".join(f"{h} ({e:+.3f}{', uncertain' if getattr(k, 'uncertain', False) else ''})"
                           for k in keys[:10] for h, e in [k]) or "none"
        base = s.get("baseline", {})
        title = (r.task or f.path.name) + (f" ({f.label})" if f.label else "")
        out.append(f"<h3>{_e(title)}</h3><p>{_e(s.get('model', ''))}, {_e(s.get('n_pairs'))} prompt pairs, "
                   f"{_e(s.get('mode', 'path'))} patching; accuracy before filtering {_pct(s.get('accuracy'))}; the "
                   f"counterfactual prompt keeps the answer {_pct(s.get('counterfactual_accuracy'))} of the time and "
                   f"changes the answer logit by {_pct(base.get('full_effect_relative_logit'), 1)}. "
                   f"<b>{len(keys)} key heads</b> by <code>{_e(r.key_rule)}</code>: {_e(listed)}.</p>")
        out.append(validity_banner(r.validity()))
        out.append(page.figure(r.figure(), f.label) + f.config_html())
    out.append(compare_runs(identify))
    if len(identify) > 1:
        ops = [(f.result.task or str(f.path)) + (f" ({f.label})" if f.label else "") for f in identify]
        sets = [{h for h, _ in f.result.key_heads()} for f in identify]
        out.append("<h3>Shared key heads</h3><p>How many key heads each pair of tasks shares (the diagonal: each "
                   "task's own count), as in the paper's Figure 15.</p>"
                   + table(["", *ops], [[a, *[len(sa & sb) for sb in sets]] for a, sa in zip(ops, sets)]))
    for f in (f for f in found if f.kind == "per_operation"):
        r = f.result
        k = len(next(iter(r.key_heads.values()), []))
        out.append(f"<h3>Figure 15: key heads per operation</h3><p>The same sweep on each operation, one shared colour "
                   f"scale ({_e(r.metric)}); the table counts the top-{k} heads each pair of operations shares.</p>")
        out.append(page.figure(heatmap_grid(r.head_effects, f"Head effects per operation ({r.metric}, %)", r.metric)))
        out.append(table(["", *r.operations], [[a, *row] for a, row in zip(r.operations, r.overlap)]) + f.config_html())
    return "".join(out)


def compare_runs(identify: list[Found]) -> str:
    """Two or more identify runs of one task side by side: for each run after the first, the key heads it gains and
    loses against the first, and the heads whose effect moved most (in the key rule's metric)."""
    out = []
    by_task: dict[str, list[Found]] = {}
    for f in identify:
        by_task.setdefault(_task_of(f), []).append(f)
    for task, runs in by_task.items():
        if len(runs) < 2:
            continue
        base = runs[0]
        metric = getattr(base.result.key_rule, "metric", None)  # the key rule's metric (a KeyRule)
        rows = []
        for other in runs[1:]:
            a = dict(base.result.key_heads())
            b = dict(other.result.key_heads())
            gained = [h for h in b if h not in a]
            lost = [h for h in a if h not in b]
            try:
                ea, eb = (r.result.scores(metric) if metric else r.result.scores() for r in (base, other))
                d = (eb.heads - ea.heads).nan_to_num()
                top = d.abs().flatten().topk(min(5, d.numel())).indices.tolist()  # the largest changes, not a ranking
                n_heads = d.shape[1]
                moved = ", ".join(f"{i // n_heads}.{i % n_heads} {float(d.flatten()[i]):+.3f}" for i in top)
            except (RuntimeError, ValueError, KeyError, IndexError):  # different models: no common head grid
                moved = "n/a (different head grids)"
            rows.append([other.label or other.path.name, _heads(gained) or "none", _heads(lost) or "none", moved])
        out.append(f"<h3>Runs of {_e(task)} side by side</h3><p>Against <b>{_e(base.label or base.path.name)}</b>: "
                   f"the key heads each other run gains and loses, and the five heads whose effect moved most "
                   f"(other minus first, in {_e(metric or 'the default metric')}).</p>"
                   + table(["run", "key heads gained", "key heads lost", "largest effect changes"], rows))
    return "".join(out)


def _knockout_text(r: Any) -> str:
    c = r.curve
    k = max(c.ks)
    i = c.ks.index(k)
    seeds = [row[i] for row in c.random_accuracy]
    rnd = sum(seeds) / max(1, len(seeds))
    key = c.effect_accuracy[i]
    gap = c.gap(k) if hasattr(c, "gap") else None
    if gap is not None:  # the paired bootstrap over pairs of (random seeds' mean - key heads), in accuracy
        span = (f"{gap['gap'] * 100:+.1f} accuracy points ({gap['level']:.0%} bootstrap interval over the "
                f"{c.n_pairs} pairs: {gap['low'] * 100:+.1f} to {gap['high'] * 100:+.1f})")
        if gap["low"] > 0:
            verdict = (f"Knocking out the top {k} heads of the ranking lowers accuracy more than {k} random heads by {span}: the interval "
                       f"lies above 0, so on these pairs the gap is outside chance.")
        elif gap["gap"] <= 0:
            verdict = (f"<b>The top {k} heads knock out no more than random ones here</b>: the top-vs-random gap with "
                       f"{k} heads out is {span}, an interval that holds 0.")
        else:
            verdict = (f"<b>The top-vs-random gap is not outside its interval</b>: with {k} heads out it is {span}, "
                       f"an interval that holds 0, so these pairs do not tell the top {k} heads from random ones.")
    elif seeds and key < min(seeds):
        verdict = (f"The top {k} heads' knockout is below every one of the {len(seeds)} random seeds' (lowest "
                   f"{_pct(min(seeds))}).")
    elif seeds:
        verdict = (f"<b>The top {k} heads knock out no more than random ones here</b>: {_pct(key)} lies within the random "
                   f"seeds' range ({_pct(min(seeds))}-{_pct(max(seeds))}), so on these pairs the gap is not "
                   f"distinguishable from chance.")
    else:
        verdict = ""
    band = ("bands: 95% bootstrap intervals over pairs" if gap is not None
            else "grey band: min-max over the seeds")
    return (f"<p class='what'>Mean-ablating the first k heads of the effect ranking (red) against k random heads "
            f"(grey: mean over {len(c.random_accuracy)} seeds; {band}), on {r.n_pairs or '?'} "
            f"{_e(r.task)} pairs (Figure 3). With {k} heads knocked out, accuracy is "
            f"{_pct(key)} for the top {k} heads of the ranking and {_pct(rnd)} for random ones "
            f"(from {_pct(c.effect_accuracy[0])} with none). {verdict} First heads: {_e(_heads(c.ranking[:k]))}.</p>")


def transfer_section(page: Page, found: list[Found]) -> str:
    out = []
    for f in found:
        r = f.result
        res = r.results
        names = list(res)
        task = f.config.get("task", "the templates")
        what = ("each exponentiation template (Table 3)" if task == "exponentiation" else
                "each data set (Figure 4; MMLU checks that other abilities survive)")
        top = _top_label(f, len(r.key_heads))
        out.append(f"<p class='what'>Accuracy on {what} before and after knocking out the {_e(top)} of the identify run "
                   f"on {_e(task)} ({_e(_heads(r.key_heads))}; its key rule's heads first), and after knocking out as "
                   f"many random heads.</p>")
        ci = r.intervals()  # the Wilson interval of each accuracy over the set's items
        fig = r.figure()  # its title names the heads' task (two transfers in one report are told apart)
        fig.update_layout(title_text=f"{fig.layout.title.text or 'Transfer of the knockout'}: heads of {task}")
        out.append(page.figure(fig, f.label))
        out.append(table(["data set", "n", "before", f"{top} out", "random heads out"],
                         [[r.examples.get(k, k) if task == "exponentiation" else k, res[k].get("n", ""),
                           *[_pct(res[k].get(a), 1) + _ci(ci[k].get(a)) for a in
                             ("accuracy_before", "accuracy_after", "accuracy_random_heads")]] for k in names])
                   + "<p class='note'>[low-high]: 95% Wilson interval over the set's n items.</p>" + f.config_html())
    return "".join(out)


def _ci(iv: Any) -> str:
    """An interval of shares as the tables show it: `` [31-86]`` (empty without one)."""
    return "" if not iv or iv[0] != iv[0] else f" [{100 * iv[0]:.0f}-{100 * iv[1]:.0f}]"


def word_problems_section(page: Page, found: list[Found]) -> str:
    return page.per_result(found, lambda r: (
        f"<p class='what'>Key heads found on word problems whose asking phrase is rewritten (Table 4), how "
        f"many they share with the {len(r.template_heads)} template key heads ({_e(_heads(r.template_heads))}), "
        f"and accuracy after knocking out each set.</p>"))


def _roles_text(r: Any) -> str:
    ops = r.by_operation
    dom = next((d["dominant"] for d in ops.values() if d.get("dominant")), {})
    rule = r.config_json().get("key_rule")
    heads = _top_label_of(rule, len(dom)) if dom else "heads"
    bare = [op for op, d in ops.items() if d.get("no_roles_given")]
    if bare:  # never a page of 100% "other": the pairs mark no operand or operator
        return (f"<p class='note'>No roles given for {_e(', '.join(bare))}: the pairs mark no operand or operator "
                f"(a pairs file without \"roles\" whose prompts match no template; docs/identify.md), so attention by "
                f"role is not shown for them.</p>" + ("" if len(bare) == len(ops) else _roles_text_of(ops, heads, bare)))
    return _roles_text_of(ops, heads, [])


def _roles_text_of(ops: dict, heads: str, bare: list[str]) -> str:
    ops = {op: d for op, d in ops.items() if op not in bare}
    dom = next(iter(ops.values())).get("dominant", {})
    return (f"<p class='what'>Where each of the {_e(heads)} (the key rule's heads first) looks from END: its attention summed over the tokens of each "
            f"role (operands A and B, the operator, the answer prefix, the few-shot prefix, the rest), averaged "
            f"over prompts of each operation (Figure 5). Most-attended role on {_e(next(iter(ops)))}: "
            f"{_e(', '.join(f'{h} {r}' for h, r in dom.items()))}.</p>")


def views_section(page: Page, found: list[Found]) -> str:
    out = []
    for f in found:
        r = f.result
        views = parse_views(r.page)
        out.append(f"<p class='what'>The attention patterns of the {_e(_top_label(f, len(r.heads)))} "
                   f"{_e(_heads(r.heads))} (the key rule's heads first) on a few "
                   f"prompts of each operation (circuitsvis, Figures 7 and 16): pick a head, hover a token to see where "
                   f"it attends from the last position.</p>")
        if not views:
            out.append(f"<p class='note'>No circuitsvis view could be read from {_e(f.path / 'figure.html')}.</p>")
        else:
            from circuits.viz.colours import ATTENTION_KEY

            out.append(ATTENTION_KEY)
        for caption, component, props in views:
            shown = caption if len(caption) <= 300 else "…" + caption[-300:]
            out.append(f"<h3 class='prompt'>{_e(shown)}</h3>" + page.view(component, props))
        out.append(f.config_html())
    return "".join(out)


def lens_section(page: Page, found: list[Found]) -> str:
    from circuits.viz.figures import prompt_label, top_tokens_figure

    def text(r: Any) -> str:
        start = (f"writing starts at layer {_e(r.writing_start)}" if r.writing_start is not None else "no layer's MLP "
                 "output points at the answer more than at other numbers by 0.02 in at least half of the later layers, "
                 "so no writing start is marked")
        return (f"<p class='what'>The MLPs through the logit lens (Figure 6), averaged over {_e(r.n_pairs or '?')} "
                f"pairs: how much each layer's MLP input points at the operands' unembeddings (6a; peaks at layers "
                f"{_e(r.peak('in_A'))} for A and {_e(r.peak('in_B'))} for B), and how much what the MLP adds points at "
                f"the answer rather than other numbers (6b; {start}); 6c "
                f"lists the number tokens each MLP adds most for {_e(repr(r.example))}.</p>")

    return page.per_result(found, text, lambda r: [r.figure(), top_tokens_figure(
        r.top_tokens, "6c: top number tokens of MLP_out - MLP_in for " + prompt_label(r.example)) if r.top_tokens else None])


def _metric(scores: dict[str, Any]) -> tuple[str, float | None]:
    if "acc" in scores:
        return "acc", scores["acc"]
    for k, v in scores.items():
        if k != "n" and isinstance(v, (int, float)):
            return k, v
    return "", None


def _cell(scores: dict[str, Any], delta: float | None) -> str:
    name, v = _metric(scores)
    if v is None:
        return "-"
    scale = 100 if name == "acc" else 1
    shown = f"{scale * v:.1f}" if name == "acc" else f"{v:.2f}"
    return shown + (f" ({scale * delta:+.1f})" if delta is not None else "")


def sft_section(page: Page, found: list[Found]) -> str:
    out = []
    for f in (f for f in found if f.kind == "sft_table"):
        r = f.result
        rows = r.rows
        tasks = list(rows[0]["tasks"])
        out.append(f"<p class='what'>Base model, full fine-tuning and Precise SFT (only the Q/K/V/O slices of the key "
                   f"heads {_e(_heads(r.heads))} are trained) on math and generic benchmarks (Table 1): accuracy % (or "
                   f"perplexity), change from the base model in brackets; train speed measured in the same run.</p>")
        header = ["model", "train speed", "tuned params"] + [
            f"{t} ({_metric(rows[0]['tasks'][t])[0]}, n={rows[0]['tasks'][t].get('n', '?')})" for t in tasks]
        body = []
        for row in rows:
            tr = row.get("train", {})
            body.append([row["name"], f"{tr['samples_per_s']:.2f} sam./s" if "samples_per_s" in tr else "-",
                         f"{tr['tuned_parameters'] / 1e6:.2f}M" if "tuned_parameters" in tr else "-",
                         *[_cell(row["tasks"][t], row.get("delta", {}).get(t)) for t in tasks]])
        out.append(table(header, body))
        if all("arithmetic_by_form" in row for row in rows):
            forms = sorted(rows[0]["arithmetic_by_form"])
            out.append("<p>Held-out arithmetic by form (accuracy %):</p>" + table(
                ["model", *forms], [[row["name"], *[f"{100 * row['arithmetic_by_form'][x]:.1f}" for x in forms]] for row in rows]))
        out.append(f.config_html())
    for f in (f for f in found if f.kind == "sft-study"):  # circuits sft-study (issue 39)
        r, names = f.result, {v["name"]: v for v in f.result.variants}
        tasks, ppl = list(r.tasks()), r.perplexity_tasks()

        out.append(f"<p class='what'>Does choosing the circuit matter? Each arm trained with {len(r.config.seeds)} "
                   "seeds at the lr its validation sweep chose, scored on the same items: accuracy % with its 95% "
                   "interval over seeds and items; in brackets, the paired difference from Precise SFT (key heads) "
                   "with its interval, * where Holm's correction over the arms keeps it apart from 0"
                   + ("; perplexity: word perplexity, its differences the % change" if ppl else "") + ".</p>")
        out.append(table(["arm", "lr", "tuned params", *tasks],
                         [[row["name"], f"{names[row['name']]['lr']:g}",
                           f"{names[row['name']]['tuned_parameters'] / 1e6:.3f}M",
                           *[r.cell(row["tasks"][t], t) for t in tasks]] for row in r.table()]))
        out.append(f.config_html())
    for f in (f for f in found if f.kind == "finetune"):
        r = f.result
        heads = f.config.get("heads")
        out.append(f"<h3>Fine-tuning run <code>{_e(f.path.name)}</code></h3><p>{_e(r.steps)} optimizer steps over "
                   f"{_e(r.samples)} samples at {r.samples_per_s:.2f} samples/s; "
                   f"{r.tuned_parameters / 1e6:.2f}M of {r.total_parameters / 1e6:.1f}M parameters "
                   f"tuned{'; heads ' + _e(_heads(heads)) if heads else ''}.</p>")
        if r.losses:
            fig = go.Figure(go.Scatter(y=r.losses, mode="lines+markers", name="loss"))
            fig.update_layout(title="training loss", xaxis_title="step", yaxis_title="loss", height=320)
            out.append(page.figure(fig))
        out.append(f.config_html())
    for f in (f for f in found if f.kind == "evaluate"):
        tasks = f.result.tasks
        delta = f.config.get("delta")
        out.append(f"<h3>Evaluation <code>{_e(f.path.name)}</code></h3><p>{_e(f.config.get('model', ''))}"
                   f"{', with delta ' + _e(delta) if delta else ', base weights'}.</p>")
        out.append(table(["task", "metric", "value", "n"],
                         [[t, _metric(s)[0], _cell(s, None), s.get("n", "")] for t, s in tasks.items()]) + f.config_html())
    return "".join(out)


def cross_model_section(page: Page, found: list[Found]) -> str:
    PAPER = type(found[0].result).paper if found else {}  # the paper's numbers, kept with the result type

    out = []
    for f in found:
        r = f.result
        names = r.names()
        out.append("<p class='what'>The paper's claims measured on each model, as the paper sets LLaMA2-7B beside 13B "
                   "and Mistral-7B: the share of heads that are key heads, accuracy after knocking out the top-k heads "
                   "against k random heads (Figure 3), the knockout's transfer to other formats (Figure 4), where the "
                   "top heads attend (Figure 5) and from which depth the MLPs write the answer (Figure 6b). Depths are "
                   "shares of each model's layers.</p>")
        out.append(page.figure(r.figure()))
        rows = []
        for op in next(iter(r.models.values()))["operations"]:
            rows.append([f"key heads, {op}", PAPER["share_key_heads"] if op == "addition" else ""] + [
                f"{len(r.models[n]['operations'][op]['key_heads'])} ({_pct(r.models[n]['operations'][op]['share_key_heads'], 1)})"
                if op in r.models[n]["operations"] else "" for n in names])
        ks = [k for k in next(iter(r.models.values()))["knockout"]["ks"] if k]
        for k in ks[-2:]:
            drops = [r.knockout_drop(n, k) for n in names]
            rows.append([f"knockout of {k} heads: top vs random", PAPER["knockout"] if k == ks[-1] else ""] +
                        [f"{_pct(d[0])} vs {_pct(d[1])}" if d else "n/a" for d in drops])
        for task in next(iter(r.models.values()))["transfer"]:
            rows.append([f"transfer: {task}", ""] + [
                f"{_pct(t['accuracy_before'])} -> {_pct(t['accuracy_after'])} (random {_pct(t['accuracy_random_heads'])})"
                for t in (r.models[n]["transfer"][task] for n in names)])
        rows.append(["roles of the top heads", PAPER["roles"]] + [
            ", ".join(f"{h} {role}" for h, role in list(r.models[n]["roles"]["dominant"].items())[:4]) for n in names])
        depth = [r.key_head_depth(n) for n in names]
        rows.append(["addition key heads, depth", PAPER["key_head_depth"]] +
                    [f"{a:.2f}-{b:.2f}" if (a, b) != (None, None) else "n/a" for a, b in (d or (None, None) for d in depth)])
        start = [r.writing_start(n) for n in names]
        rows.append(["MLPs write the answer from", PAPER["writing_start"]] +
                    [f"layer {w[0]} of {r.models[n]['n_layers']} ({w[1]:.2f})" if w else "n/a" for n, w in zip(names, start)])
        out.append(table(["claim", "paper (LLaMA2-7B)", *names], rows) + f.config_html())
    return "".join(out)


@dataclass(frozen=True)
class Section:
    """A section of the report: its anchor, heading and renderer. The kinds it draws and how to make them (shown when
    the inputs hold none) come from the job table (:mod:`circuits.jobs`): each job lists the sections of its
    results."""

    anchor: str
    heading: str
    render: Callable[[Page, list[Found]], str]

    @property
    def kinds(self) -> tuple[str, ...]:
        return jobs.section_kinds(self.anchor)

    @property
    def how(self) -> str:
        return jobs.section_how(self.anchor)


def per_result(text: Callable[[Any], str]) -> Callable[[Page, list[Found]], str]:
    """A section's renderer that draws each found result alone (:meth:`~circuits.viz.page.Page.per_result`)."""
    return lambda page, found: page.per_result(found, text)


SECTIONS = (
    Section("key-heads", "Key heads per operation (identify)", key_heads_section),
    Section("knockout", "Knockout curves (validate)", per_result(_knockout_text)),
    Section("transfer", "Transfer of the knockout (validate)", transfer_section),
    Section("word-problems", "Key heads on word problems (validate)", word_problems_section),
    Section("attention-roles", "Attention by token role (explain)", per_result(_roles_text)),
    Section("attention-views", "Attention views of the top-ranked heads (explain)", views_section),
    Section("logit-lens", "MLP logit lens (explain)", lens_section),
    Section("cross-model", "The claims on several models", cross_model_section),
    Section("precise-sft", "Precise SFT (fine-tune)", sft_section),
    # Beyond heads at END (circuits.viz.analysis_sections).
    Section("screen", "Attribution screen, audited by the exact engine (identify)", per_result(A._screen_text)),
    Section("positions", "Every position: the information flow (identify)", A.positions_section),
    Section("neurons", "Neurons of the key MLPs (identify, validate)", per_result(A._neurons_text)),
    Section("heuristics", "How the key MLPs compute: heuristic neurons (explain)", A.heuristics_section),
    Section("edges", "Edges into the chosen heads and MLPs (identify)", A.edges_section),
    Section("faithfulness", "Faithfulness of each ranking's circuits, as MIB scores them (identify)",
            A.faithfulness_section),
    Section("numbers", "How the key components compute: Fourier features and digit positions (explain)",
            A.numbers_section),
    Section("carry", "The carry and the units digit: one computation or two? (identify, explain)",
            A.carry_section),
    Section("uncertainty", "How sure is the ranking (identify, validate)", A.uncertainty_section),
)
