"""One shareable HTML page from saved results: ``circuits report RESULTS_DIR... --out report.html``.

Nothing here runs a model: every figure is redrawn from the JSON that the identify job
(:mod:`circuits.identify_job`), the figure scripts (``experiments/fig*.py``) and the fine-tuning jobs
(``circuits finetune``/``evaluate``, ``experiments/table1_precise_sft.py``) saved. :func:`collect`
walks the given folders and recognises each result by the files and keys it holds; :func:`build_report`
renders one section per step of the method (Figures 2-7 and 15, Table 1), each with a sentence saying
what it shows and the config that made it; a section with nothing in the inputs says so and how to
make it.

The page opens offline: plotly.js and the circuitsvis bundle are inlined once each (not per figure),
and every figure only carries its data.
"""

from __future__ import annotations

import datetime
import html
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import plotly.graph_objects as go

Kind = Literal["identify", "key_heads", "per_operation", "knockout", "transfer", "roles", "views", "lens",
               "sft_table", "finetune", "evaluation"]
OPERATION_ORDER = ("addition", "subtraction", "multiplication", "division", "all")
MAX_DEPTH = 4


@dataclass(frozen=True)
class Found:
    """One saved result: what it is, where it lies, the config that made it, and its data."""

    kind: Kind
    path: Path
    config: dict[str, Any]
    data: dict[str, Any]

    @property
    def label(self) -> str:
        return str(self.path)


# --- finding results --------------------------------------------------------------------------------


def _read(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def _kind_of_data(d: dict[str, Any], folder: Path) -> Kind | None:
    """Which figure script wrote this ``data.json`` (see ``experiments/``), by its keys."""
    if "curve" in d:
        return "knockout"
    if "by_operation" in d:
        return "roles"
    if "means" in d and "top_tokens" in d:
        return "lens"
    if "operations" in d and isinstance(d.get("head_effects"), dict):
        return "per_operation"
    if isinstance(d.get("head_effects"), list) and "mlp_effects" in d:
        return "key_heads"
    if "results" in d and "key_heads" in d:
        return "transfer"
    if "prompts" in d and "heads" in d and (folder / "figure.html").is_file():
        return "views"
    if isinstance(d.get("rows"), list) and all("tasks" in r for r in d["rows"]):
        return "sft_table"
    return None


def classify(folder: Path) -> Found | None:
    """The result held by ``folder``, or None when it holds none this report knows."""
    config = _read(folder / "config.json")
    config = config if isinstance(config, dict) else {}
    summary = _read(folder / "summary.json")
    if isinstance(summary, dict) and "head_effects" in summary and "key_heads" in summary:
        return Found("identify", folder, config or summary.get("config", {}), summary)
    data = _read(folder / "data.json")
    if isinstance(data, dict) and (kind := _kind_of_data(data, folder)):
        return Found(kind, folder, config, data)
    result = _read(folder / "result.json")
    if isinstance(result, dict) and "samples_per_s" in result:
        return Found("finetune", folder, config, result)
    return None


def classify_file(path: Path) -> Found | None:
    """A single JSON file: an evaluation result (``circuits evaluate --out FILE``) or a folder's main file."""
    if path.name in ("summary.json", "data.json", "result.json"):
        return classify(path.parent)
    d = _read(path)
    if isinstance(d, dict) and isinstance(d.get("tasks"), dict):
        return Found("evaluation", path, d.get("config", {}), d)
    return None


def collect(paths: Iterable[str | Path]) -> tuple[list[Found], list[Path]]:
    """Every result under ``paths`` (folders are walked; a recognised folder's sub-folders are not, and
    hidden or ``_``-prefixed ones are skipped), and the folders with a ``config.json`` that were not recognised."""
    found: list[Found] = []
    unknown: list[Path] = []

    def walk(folder: Path, depth: int) -> None:
        hit = classify(folder)
        if hit is not None:
            found.append(hit)
            return
        if (folder / "config.json").is_file():
            unknown.append(folder)
        if depth >= MAX_DEPTH:
            return
        for child in sorted(folder.iterdir()):
            if child.is_dir() and not child.name.startswith((".", "_")):
                walk(child, depth + 1)
            elif child.suffix == ".json" and depth == 0 and child.name not in ("config.json",):
                if (hit := classify_file(child)) is not None and hit.kind == "evaluation":
                    found.append(hit)

    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"no such results folder or file: {p}")
        if p.is_dir():
            walk(p, 0)
        elif (hit := classify_file(p)) is not None:
            found.append(hit)
    unique: dict[tuple[str, Path], Found] = {}
    for f in found:  # the same folder given twice, or a folder and its file
        unique.setdefault((f.kind, f.path.resolve()), f)
    return list(unique.values()), unknown


# --- page pieces ------------------------------------------------------------------------------------


def _e(x: Any) -> str:
    return html.escape(str(x))


def _pct(x: float | None, digits: int = 0) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


CONFIG_KEYS = ("model", "task", "mode", "n_pairs", "key_rule", "seed", "n_prompts", "n_key_heads", "ks", "seeds",
               "operations", "top_k", "kv_policy", "lr", "epochs", "batch_size", "limit")


def config_block(found: Found) -> str:
    """The config that made a result: its main fields in one line, the whole of it folded."""
    c = found.config
    main = ", ".join(f"{k}={c[k]}" for k in CONFIG_KEYS if k in c and c[k] not in (None, "", [], ()))
    full = json.dumps(c, indent=1, default=str) if c else "(no config.json saved)"
    return (f"<details class='config'><summary>made by <code>{_e(found.path)}</code>"
            f"{': ' + _e(main) if main else ''}</summary><pre>{_e(full)}</pre></details>")


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Page:
    """Collects sections; plotly figures and circuitsvis views share one copy of their JavaScript."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.sections: list[tuple[str, str, str]] = []  # (anchor, heading, body)
        self.n_figures = 0
        self.n_views = 0

    def figure(self, fig: go.Figure) -> str:
        self.n_figures += 1
        return fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{self.n_figures}",
                           config={"displaylogo": False, "responsive": True})

    def view(self, component: str, props: dict[str, Any]) -> str:
        """A circuitsvis component, rendered by the bundle inlined once in the page head."""
        self.n_views += 1
        vid = f"cv-{self.n_views}"
        data = json.dumps(props).replace("</", "<\\/")
        return (f"<div id='{vid}' class='cv-view'></div>"
                f"<script>CircuitsVis.render({json.dumps(vid)}, CircuitsVis.{component}, {data});</script>")

    def add(self, anchor: str, heading: str, body: str) -> None:
        self.sections.append((anchor, heading, body))

    def render(self, inputs: Sequence[str]) -> str:
        scripts = []
        if self.n_figures:
            from plotly.offline import get_plotlyjs

            scripts.append(f"<script type='text/javascript'>{get_plotlyjs()}</script>")
        if self.n_views:
            scripts.append(f"<script type='text/javascript'>{circuitsvis_bundle()}</script>")
        toc = "".join(f"<li><a href='#{a}'>{_e(h)}</a></li>" for a, h, _ in self.sections)
        body = "".join(f"<section id='{a}'><h2>{_e(h)}</h2>{b}</section>" for a, h, b in self.sections)
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        ins = "".join(f"<code>{_e(i)}</code> " for i in inputs)
        return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(self.title)}</title>"
                f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{CSS}</style>"
                f"{''.join(scripts)}</head><body><header><h1>{_e(self.title)}</h1>"
                f"<p class='meta'>Built {when} by <code>circuits report</code> from {ins}; no model was run. "
                f"The page is self-contained and opens offline.</p><nav><ol>{toc}</ol></nav></header>"
                f"{body}<footer>circuits: find, explain and precisely fine-tune the components that do arithmetic "
                f"(Zhang et al., ICML 2024).</footer></body></html>")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1200px;margin:0 auto;padding:0 1.5em 3em;
color:#222;line-height:1.45}
h1{margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}h3{margin-bottom:.3em}
.meta{color:#666;font-size:.9em}.what{font-size:1.02em}.note{background:#f6f6f2;border-left:4px solid #bbb;
padding:.5em .8em;color:#555}details.config{font-size:.85em;color:#555;margin:.3em 0 1.2em}
details.config pre{background:#f7f7f7;padding:.6em;max-height:20em;overflow:auto}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}th,td{border:1px solid #ddd;padding:.25em .6em;
text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.cv-view{margin:.4em 0 1.2em}code{background:#f3f3f3;padding:0 .2em}footer{margin-top:3em;color:#888;font-size:.85em}
"""


def circuitsvis_bundle() -> str:
    """The circuitsvis JavaScript bundle (defines the global ``CircuitsVis``), taken from the
    self-contained ``local_src`` of a throw-away view so it matches the installed circuitsvis."""
    import circuitsvis as cv

    src = cv.attention.attention_heads(attention=[[[1.0]]], tokens=["x"]).local_src
    start = src.index(">", src.index("<script")) + 1
    bundle = src[start : src.rindex("CircuitsVis.render(")]
    # No source map beside the page: a browser with dev tools open would log a failed fetch.
    return re.sub(r"//# sourceMappingURL=\S+", "", bundle).replace("</script", "<\\/script")


_RENDER = re.compile(r'CircuitsVis\.render\(\s*"[^"]+",\s*CircuitsVis\.(\w+),\s*(\{.*?\})\s*\)\s*</script>', re.S)


def parse_views(page: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(caption, component, props) of each circuitsvis view in a page written by
    :func:`circuits.attention.attention_html` (a caption is the ``<h3>`` before the view)."""
    views = []
    for chunk in page.split("<h3>")[1:]:
        caption = html.unescape(chunk.split("</h3>", 1)[0])
        for m in _RENDER.finditer(chunk):
            views.append((caption, m.group(1), json.loads(m.group(2))))
    if not views:  # a page without captions
        views = [("", m.group(1), json.loads(m.group(2))) for m in _RENDER.finditer(page)]
    return views


# --- sections ---------------------------------------------------------------------------------------


def _heads(hs: Iterable[Sequence[Any]]) -> str:
    return ", ".join(f"{h[0]}.{h[1]}" for h in hs)


def _op_rank(f: Found) -> tuple[int, str]:
    task = f.data.get("task") or f.config.get("task") or ""
    return (OPERATION_ORDER.index(task) if task in OPERATION_ORDER else len(OPERATION_ORDER), str(f.path))


def key_heads_section(page: Page, found: list[Found]) -> str:
    import torch

    from circuits.figures import heatmap_grid
    from circuits.plotting import head_heatmap

    out = ["<p class='what'>Each heatmap shows, for every attention head (layer &times; head) and every MLP, how much "
           "patching its output at the END position with its output on the counterfactual prompt changes the answer "
           "logit (relative change, the paper's Figure 2 metric; red: the answer logit drops, blue: it rises). Boxed cells are the key heads chosen "
           "by the key rule. Hover a cell to read its layer, head and effect.</p>"]
    identify = sorted((f for f in found if f.kind == "identify"), key=_op_rank)
    for f in identify:
        s = f.data
        rule = s.get("key_rule", {}).get("rule", "?")
        metric = s.get("key_rule", {}).get("metric", "")
        keys = s.get("key_heads", [])
        listed = ", ".join(f"{l}.{h} ({e:+.3f})" for l, h, e in keys[:10]) or "none"
        base = s.get("baseline", {})
        out.append(f"<h3>{_e(s.get('task') or f.path.name)}</h3><p>{_e(s.get('model', ''))}, {s.get('n_pairs')} prompt pairs, "
                   f"{_e(s.get('method') or s.get('mode', 'path') + ' patching')}; accuracy before filtering {_pct(s.get('accuracy'))}; the "
                   f"counterfactual prompt keeps the answer {_pct(s.get('counterfactual_accuracy'))} of the time and "
                   f"changes the answer logit by {_pct(base.get('full_effect_relative_logit'), 1)}. "
                   f"<b>{len(keys)} key heads</b> by <code>{_e(rule)}</code> ({_e(metric)}): {_e(listed)}.</p>")
        fig = head_heatmap(torch.tensor(s["head_effects"]), torch.tensor(s["mlp_effects"]) if s.get("mlp_effects") else None,
                           title=f"{s.get('task') or f.path.name}: relative change of the answer logit", key_heads=[(l, h) for l, h, _ in keys])
        out.append(page.figure(fig) + config_block(f))
    if len(identify) > 1:
        ops = [f.data.get("task", str(f.path)) for f in identify]
        sets = [{(l, h) for l, h, _ in f.data.get("key_heads", [])} for f in identify]
        out.append("<h3>Shared key heads</h3><p>How many key heads each pair of tasks shares (the diagonal: each "
                   "task's own count), as in the paper's Figure 15.</p>"
                   + table(["", *ops], [[a, *[len(sa & sb) for sb in sets]] for a, sa in zip(ops, sets)]))
    for f in (f for f in found if f.kind == "key_heads"):
        d = f.data
        below = [tuple(t[:2]) for t in d.get("top_heads", []) if t[2] < f.config.get("threshold", -0.05)]
        out.append(f"<h3>Figure 2: {_e(d.get('task', ''))}</h3><p>{d.get('n_pairs')} pairs; "
                   f"{d.get('n_below_threshold', len(below))} heads below the paper's cut "
                   f"({_pct(d.get('share_below_threshold'), 1)} of all heads), boxed.</p>")
        fig = head_heatmap(torch.tensor(d["head_effects"]), torch.tensor(d["mlp_effects"]),
                           title=f"{d.get('task', '')}: relative change of the answer logit", key_heads=below)
        out.append(page.figure(fig) + config_block(f))
    for f in (f for f in found if f.kind == "per_operation"):
        d = f.data
        out.append(f"<h3>Figure 15: key heads per operation</h3><p>The same sweep on each operation, one shared colour "
                   f"scale; the table counts the top-{len(next(iter(d['key_heads'].values()), []))} heads each pair of "
                   f"operations shares.</p>")
        out.append(page.figure(heatmap_grid(d["head_effects"], "Head effects per operation (%)")))
        out.append(table(["", *d["operations"]], [[a, *row] for a, row in zip(d["operations"], d["overlap"])]) + config_block(f))
    return "".join(out)


def knockout_section(page: Page, found: list[Found]) -> str:
    from circuits.figures import knockout_panels

    out = []
    for f in found:
        c = f.data["curve"]
        k = max(c["ks"])
        i = c["ks"].index(k)
        rnd = sum(r[i] for r in c["random_accuracy"]) / max(1, len(c["random_accuracy"]))
        out.append(f"<p class='what'>Mean-ablating the first k heads of the effect ranking (red) against k random heads "
                   f"(grey: mean and min-max over {len(c['random_accuracy'])} seeds), on {f.data.get('n_pairs', '?')} "
                   f"{_e(f.data.get('task', ''))} pairs (Figure 3). With {k} heads knocked out, accuracy is "
                   f"{_pct(c['effect_accuracy'][i])} for the key heads and {_pct(rnd)} for random ones "
                   f"(from {_pct(c['effect_accuracy'][0])} with none). First heads: {_e(_heads(c['ranking'][:k]))}.</p>")
        out.append(page.figure(knockout_panels(c)) + config_block(f))
    return "".join(out)


def transfer_section(page: Page, found: list[Found]) -> str:
    from circuits.figures import before_after_figure

    out = []
    for f in found:
        r = f.data["results"]
        names = list(r)
        out.append(f"<p class='what'>Accuracy on each data set before and after knocking out the "
                   f"{len(f.data['key_heads'])} key heads found on {_e(f.config.get('task', 'the templates'))} "
                   f"({_e(_heads(f.data['key_heads']))}), and after knocking out as many random heads (Figure 4; MMLU "
                   f"checks that other abilities survive).</p>")
        fig = before_after_figure(names, [r[k]["accuracy_before"] for k in names], [r[k]["accuracy_after"] for k in names],
                                  "Transfer of the key-head knockout (Figure 4)",
                                  control=[r[k].get("accuracy_random_heads") for k in names])
        out.append(page.figure(fig))
        out.append(table(["data set", "n", "before", "key heads out", "random heads out"],
                         [[k, r[k].get("n", ""), _pct(r[k]["accuracy_before"], 1), _pct(r[k]["accuracy_after"], 1),
                           _pct(r[k].get("accuracy_random_heads"), 1)] for k in names]) + config_block(f))
    return "".join(out)


def roles_section(page: Page, found: list[Found]) -> str:
    from circuits.figures import roles_panels

    out = []
    for f in found:
        ops = f.data["by_operation"]
        dom = next(iter(ops.values())).get("dominant", {})
        out.append(f"<p class='what'>Where each key head looks from END: its attention summed over the tokens of each "
                   f"role (operands A and B, the operator, the answer prefix, the few-shot prefix, the rest), averaged "
                   f"over prompts of each operation (Figure 5). Most-attended role on {_e(next(iter(ops)))}: "
                   f"{_e(', '.join(f'{h} {r}' for h, r in dom.items()))}.</p>")
        out.append(page.figure(roles_panels(ops)) + config_block(f))
    return "".join(out)


def views_section(page: Page, found: list[Found]) -> str:
    out = []
    for f in found:
        views = parse_views((f.path / "figure.html").read_text(encoding="utf-8"))
        out.append(f"<p class='what'>The attention patterns of the key heads {_e(_heads(f.data['heads']))} on a few "
                   f"prompts of each operation (circuitsvis, Figures 7 and 16): pick a head, hover a token to see where "
                   f"it attends from the last position.</p>")
        if not views:
            out.append(f"<p class='note'>No circuitsvis view could be read from {_e(f.path / 'figure.html')}.</p>")
        for caption, component, props in views:
            out.append(f"<h3><code>{_e(caption[-120:])}</code></h3>" + page.view(component, props))
        out.append(config_block(f))
    return "".join(out)


def lens_section(page: Page, found: list[Found]) -> str:
    from circuits.figures import lens_panels, top_tokens_figure

    out = []
    for f in found:
        d = f.data
        out.append(f"<p class='what'>The MLPs through the logit lens (Figure 6), averaged over {d.get('n_pairs', '?')} "
                   f"pairs: how much each layer's MLP input points at the operands' unembeddings (6a; peaks at layers "
                   f"{d.get('peak_in_A')} for A and {d.get('peak_in_B')} for B), and how much what the MLP adds points at "
                   f"the answer rather than other numbers (6b; writing starts at layer {d.get('writing_start')}); 6c "
                   f"lists the number tokens each MLP adds most for {_e(repr(d.get('example', '')))}.</p>")
        out.append(page.figure(lens_panels(d["means"])))
        out.append(page.figure(top_tokens_figure(d["top_tokens"], f"6c: top number tokens of MLP_out - MLP_in for "
                                                                  f"{d.get('example', '')!r}")) + config_block(f))
    return "".join(out)


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
        rows = f.data["rows"]
        tasks = list(rows[0]["tasks"])
        heads = f.data.get("heads", [])
        out.append(f"<p class='what'>Base model, full fine-tuning and Precise SFT (only the Q/K/V/O slices of the key "
                   f"heads {_e(_heads(heads))} are trained) on math and generic benchmarks (Table 1): accuracy % (or "
                   f"perplexity), change from the base model in brackets; train speed measured in the same run.</p>")
        header = ["model", "train speed", "tuned params"] + [
            f"{t} ({_metric(rows[0]['tasks'][t])[0]}, n={rows[0]['tasks'][t].get('n', '?')})" for t in tasks]
        body = []
        for r in rows:
            tr = r.get("train", {})
            body.append([r["name"], f"{tr['samples_per_s']:.2f} sam./s" if "samples_per_s" in tr else "-",
                         f"{tr['tuned_parameters'] / 1e6:.2f}M" if "tuned_parameters" in tr else "-",
                         *[_cell(r["tasks"][t], r.get("delta", {}).get(t)) for t in tasks]])
        out.append(table(header, body))
        if all("arithmetic_by_form" in r for r in rows):
            forms = sorted(rows[0]["arithmetic_by_form"])
            out.append("<p>Held-out arithmetic by form (accuracy %):</p>" + table(
                ["model", *forms], [[r["name"], *[f"{100 * r['arithmetic_by_form'][x]:.1f}" for x in forms]] for r in rows]))
        out.append(config_block(f))
    for f in (f for f in found if f.kind == "finetune"):
        r = f.data
        losses = r.get("losses", [])
        out.append(f"<h3>Fine-tuning run <code>{_e(f.path.name)}</code></h3><p>{r.get('steps')} optimizer steps over "
                   f"{r.get('samples')} samples at {r.get('samples_per_s', 0):.2f} samples/s; "
                   f"{r.get('tuned_parameters', 0) / 1e6:.2f}M of {r.get('total_parameters', 0) / 1e6:.1f}M parameters "
                   f"tuned{'; heads ' + _e(_heads(f.config['heads'])) if f.config.get('heads') else ''}.</p>")
        if losses:
            fig = go.Figure(go.Scatter(y=losses, mode="lines+markers", name="loss"))
            fig.update_layout(title="training loss", xaxis_title="step", yaxis_title="loss", height=320)
            out.append(page.figure(fig))
        out.append(config_block(f))
    for f in (f for f in found if f.kind == "evaluation"):
        tasks = f.data["tasks"]
        delta = f.config.get("delta")
        out.append(f"<h3>Evaluation <code>{_e(f.path.name)}</code></h3><p>{_e(f.config.get('model', ''))}"
                   f"{', with delta ' + _e(delta) if delta else ', base weights'}.</p>")
        out.append(table(["task", "metric", "value", "n"],
                         [[t, _metric(s)[0], _cell(s, None), s.get("n", "")] for t, s in tasks.items()]) + config_block(f))
    return "".join(out)


@dataclass(frozen=True)
class Section:
    anchor: str
    heading: str
    kinds: tuple[Kind, ...]
    render: Callable[[Page, list[Found]], str]
    how: str  # how to make it, shown when the inputs hold none


SECTIONS = (
    Section("key-heads", "Key heads per operation (identify)", ("identify", "key_heads", "per_operation"),
            key_heads_section, "circuits identify --model smollm2 --task all --out results/identify"),
    Section("knockout", "Knockout curves (validate)", ("knockout",), knockout_section,
            "python experiments/fig3_knockout.py"),
    Section("transfer", "Transfer of the knockout (validate)", ("transfer",), transfer_section,
            "python experiments/fig4_transfer.py"),
    Section("attention-roles", "Attention by token role (explain)", ("roles",), roles_section,
            "python experiments/fig5_attention_roles.py"),
    Section("attention-views", "Attention views of the key heads (explain)", ("views",), views_section,
            "python experiments/fig7_attention_views.py"),
    Section("logit-lens", "MLP logit lens (explain)", ("lens",), lens_section, "python experiments/fig6_mlp_logit_lens.py"),
    Section("precise-sft", "Precise SFT (fine-tune)", ("sft_table", "finetune", "evaluation"), sft_section,
            "python experiments/table1_precise_sft.py, or circuits finetune / circuits evaluate"),
)


def build_report(paths: Sequence[str | Path], title: str = "circuits report") -> str:
    """The report's HTML for the results under ``paths``; raises ValueError when none is found."""
    found, unknown = collect(paths)
    if not found:
        raise ValueError(f"no results found under {', '.join(map(str, paths))} (expected folders written by "
                         f"circuits identify, experiments/*.py or the fine-tuning jobs)")
    page = Page(title)
    for s in SECTIONS:
        mine = [f for f in found if f.kind in s.kinds]
        if mine:
            page.add(s.anchor, s.heading, s.render(page, mine))
        else:
            page.add(s.anchor, s.heading, f"<p class='note'>Not in the inputs, so skipped. Make it with "
                                          f"<code>{_e(s.how)}</code> and pass its folder to <code>circuits report</code>.</p>")
    if unknown:
        page.add("other", "Other results (not shown)", "<p class='note'>These folders hold results this report does not "
                 "draw; open their own <code>figure.html</code>: " + ", ".join(f"<code>{_e(u)}</code>" for u in unknown) + "</p>")
    return page.render([str(p) for p in paths])


def write_report(paths: Sequence[str | Path], out: str | Path, title: str = "circuits report") -> Path:
    """Build the report and write it atomically to ``out``."""
    text = build_report(paths, title)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}-", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
