"""The pieces of a report page: one HTML document whose plotly figures and circuitsvis views share one copy of
their JavaScript, so the page opens offline; tables and config blocks; reading circuitsvis views back from a saved
attention page.

The JavaScript (plotly.js, 4.7 MB; the circuitsvis bundle, 1.3 MB) is either inlined once per page or, by default
for files, written once into an ``_assets/`` folder beside the results and loaded by a relative path
(:func:`script_tag`): every ``heads.html``, ``figure.html`` and the report then share one copy, still offline, never
a CDN. The report walks past ``_``-prefixed folders, so ``_assets`` is never taken for a result."""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import functools
import hashlib
import html
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from circuits.types import PAIRS_FILE_REPLACES


def _e(x: Any) -> str:
    return html.escape(str(x))


def _pct(x: float | None, digits: int = 0) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


CONFIG_KEYS = ("model", "task", "mode", "n_pairs", "key_rule", "seed", "n_prompts", "n_key_heads", "ks", "seeds",
               "operations", "top_k", "kv_policy", "lr", "epochs", "batch_size", "limit")


# The pair fields a pairs file can make unused: its lines are the prompts, counterfactuals and answers (n_pairs caps the
# lines read, filter_correct and second_logit still apply; circuits.data.pairs.read_pairs_file). A config saved since
# issue 40 holds None for those its job does not read (circuits.data.pair_config.PAIRS_FILE_REPLACES); an older one
# holds the flags' values.
UNUSED_WITH_PAIRS_FILE = PAIRS_FILE_REPLACES


def config_block(path: Path, config: dict[str, Any], provenance: dict[str, Any] | None = None,
                 used: dict[str, Any] | None = None) -> str:
    """The config that made a result: its main fields in one line, then what made it (the provenance the result saved:
    backend, library versions, the toolkit's commit; read back, never rebuilt), the whole of both folded. ``used``:
    what the result says its pairs were (``n_pairs`` it holds, the ``pairs_file`` read: path, sha256, lines read),
    shown in place of the flags' values; with a pairs file, the pair fields it makes unused are left off the line and
    named under the config."""
    from circuits.versions import provenance_line

    c, used = config, used or {}
    flat = {**{k: v for sub in c.values() if isinstance(sub, dict) for k, v in sub.items()}, **c}  # nested configs too
    shown = {k: flat[k] for k in CONFIG_KEYS if k in flat and flat[k] not in (None, "", [], ())}
    if used.get("n_pairs") is not None and "n_pairs" in shown:
        shown["n_pairs"] = used["n_pairs"]  # what the result holds, not the cap the flag set
    unused = ""
    if flat.get("pairs_file"):
        read = used.get("pairs_file") or {}
        name = Path(str(read.get("path") or flat["pairs_file"])).name
        about = ([f"sha256 {str(read['sha256'])[:12]}"] if read.get("sha256") else []) + (
            [f"{read['lines_read']} lines read"] if "lines_read" in read else [])
        replaced = [k for k in UNUSED_WITH_PAIRS_FILE if k in flat and flat[k] is None]
        if replaced:  # None where the job did not read it; a field still set is one it read (identify's bootstrap seed)
            unused = f"<p class='note'>{', '.join(replaced)}: not used (the pairs are the file's lines)</p>"
        else:  # saved before issue 40: the flags' values, whether the job read them or not
            shown = {k: v for k, v in shown.items() if k not in UNUSED_WITH_PAIRS_FILE}
            unused = (f"<p class='note'>{', '.join(k for k in UNUSED_WITH_PAIRS_FILE if k in flat)}: the flags' values, "
                      "not used (the pairs are the file's lines)</p>")
        shown["pairs_file"] = f"{name} ({', '.join(about)})" if about else name
    elif flat.get("pairs_from"):  # the pairs of a saved identify result, token ids and all: its own seed made them
        shown = {k: v for k, v in shown.items() if k not in UNUSED_WITH_PAIRS_FILE}
        shown["pairs_from"] = Path(str(flat["pairs_from"])).name
        unused = (f"<p class='note'>{', '.join(k for k in UNUSED_WITH_PAIRS_FILE if k in flat)}: the flags' values, "
                  "not used (the pairs are those saved in --pairs-from)</p>")
    if len(shown.get("operations") or ()) > 1 and "task" in shown:  # a job over several operations: the task is
        shown = {("key heads of task" if k == "task" else k): v for k, v in shown.items()}  # where its heads come from
    main = ", ".join(f"{k}={v}" for k, v in shown.items())
    full = json.dumps(c, indent=1, default=str) if c else "(no config.json saved)"
    made = json.dumps(provenance, indent=1) if provenance else ""
    return (f"<details class='config'><summary>made by <code>{_e(path)}</code>"
            f"{': ' + _e(main) if main else ''}<br><span class='provenance'>{_e(provenance_line(provenance))}</span>"
            f"</summary>{unused}<pre>{_e(full)}</pre>{f'<pre>{_e(made)}</pre>' if made else ''}</details>")


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
        self.templates: list[str] = []  # the figures' plotly templates, each written once (share_template)

    def figure(self, fig: go.Figure, label: str = "") -> str:
        """A plotly figure sharing the page's plotly.js; ``label`` (what tells this run from another of its kind in
        the inputs, :func:`~circuits.viz.sections.run_labels`) is added to its title, so titles are unique."""
        if label:
            title = fig.layout.title.text or ""
            fig.update_layout(title_text=f"{title}<br><sup>run: {_e(label)}</sup>" if title else f"run: {_e(label)}")
        self.n_figures += 1
        # A figure wider than the page (the information flow of a long prompt) scrolls inside its box, never cut.
        html = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{self.n_figures}",
                           config={"displaylogo": False, "responsive": True})
        return "<div class='fig'>" + self.share_template(fig, html) + "</div>"

    def share_template(self, fig: go.Figure, html: str) -> str:
        """``html`` (``fig``'s ``to_html``) with its layout's template, the same 6.5 KB of plotly's default style in
        every figure, replaced by a reference to one copy the page writes once in its head
        (``circuitsTemplates[i]``; issue 44: 15 copies were 0.1 MB of the demo's report). The figure draws the
        same: plotly.js receives the same template object."""
        from plotly.io.json import to_json_plotly

        template = fig.to_dict().get("layout", {}).get("template")
        text = to_json_plotly(template) if template else ""
        if len(text) < 200 or html.count(text) != 1:  # nothing worth sharing, or not found once as written
            return html
        if text not in self.templates:
            self.templates.append(text)
        return html.replace(text, f"circuitsTemplates[{self.templates.index(text)}]")

    def per_result(self, found: Iterable[Any], text: Callable[[Any], str],
                   figures: Callable[[Any], Iterable[Any]] | None = None) -> str:
        """One block per found result (:class:`~circuits.viz.sections.Found`): ``text(result)``, what it shows (a
        sentence, tables), then the result's figure titled with the run's label (or ``figures(result)``, each as it
        is; ``None`` ones left out) and the config that made it."""
        return "".join(text(f.result) + ("".join(self.figure(g) for g in figures(f.result) if g is not None) if figures
                                         else self.figure(f.result.figure(), getattr(f, "label", ""))) + f.config_html()
                       for f in found)

    def view(self, component: str, props: dict[str, Any]) -> str:
        """A circuitsvis component, rendered by the bundle inlined once in the page head; an attention view's cells
        in the toolkit's colours (:data:`~circuits.viz.colours.ATTENTION_PROPS`, where ``props`` sets none)."""
        from circuits.viz.colours import ATTENTION_PROPS

        if component.startswith("Attention"):
            props = {**ATTENTION_PROPS, **props}
        self.n_views += 1
        vid = f"cv-{self.n_views}"
        data = json.dumps(props).replace("</", "<\\/")
        return (f"<div id='{vid}' class='cv-view'></div>"
                f"<script>CircuitsVis.render({json.dumps(vid)}, CircuitsVis.{component}, {data});</script>")

    def add(self, anchor: str, heading: str, body: str) -> None:
        self.sections.append((anchor, heading, body))

    def render(self, inputs: Sequence[str], out: str | Path | None = None, *, inline: bool = True,
               roots: Sequence[str | Path] = ()) -> str:
        """The page's HTML. With ``inline`` the JavaScript is embedded (a single file); else, for a page written to
        ``out``, loaded from the shared ``_assets`` copy (see :func:`script_tag`; ``roots``: folders whose copy may
        be reused)."""
        if out is None:
            inline = True
        scripts = []
        if self.n_figures:
            scripts.append(script_tag("plotly", out, inline=inline, roots=roots, default=Path(out or ".").parent))
        if self.n_views:
            scripts.append(script_tag("circuitsvis", out, inline=inline, roots=roots, default=Path(out or ".").parent))
        if self.templates:  # before any figure's script: each figure's layout refers to one of these
            shared = ",".join(t.replace("</", "<\\/") for t in self.templates)
            scripts.append(f"<script>var circuitsTemplates = [{shared}];</script>")
        toc = "".join(f"<li><a href='#{a}'>{_e(h)}</a></li>" for a, h, _ in self.sections)
        body = "".join(f"<section id='{a}'><h2>{_e(h)}</h2>{b}</section>" for a, h, b in self.sections)
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        ins = "".join(f"<code>{_e(i)}</code> " for i in inputs)
        where = ("The page is self-contained and opens offline." if inline else
                 "The page opens offline; its JavaScript is the shared copy in <code>_assets/</code> beside the results "
                 "(keep them together, or rebuild with <code>--inline</code> for a single file).")
        return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>{GENERATOR}<title>{_e(self.title)}</title>"
                f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{CSS}</style>"
                f"{''.join(scripts)}</head><body><header><h1>{_e(self.title)}</h1>"
                f"<p class='meta'>Built {when} by <code>circuits report</code> from {ins}; no model was run. "
                f"{where}</p><nav><ol>{toc}</ol></nav></header>"
                f"{body}<footer>circuits: find, explain and precisely fine-tune the components that do arithmetic "
                f"(Zhang et al., ICML 2024).</footer></body></html>")


from circuits.results import ASSETS  # noqa: E402  (the folder name the output checks know)


@functools.lru_cache(maxsize=4)
def _asset(name: str) -> tuple[str, str]:
    """The file name of a shared script and its text; the name carries the text's content hash
    (``plotly-<version>-<sha256[:16]>.min.js``), so a copy found on disk is used only when its bytes are these."""
    if name == "plotly":
        import plotly
        from plotly.offline import get_plotlyjs

        stem, suffix, text = f"plotly-{plotly.__version__}", ".min.js", get_plotlyjs()
    elif name == "circuitsvis":
        import circuitsvis

        stem, suffix, text = f"circuitsvis-{getattr(circuitsvis, '__version__', 'x')}", ".js", circuitsvis_bundle()
    else:
        raise ValueError(f"unknown script {name!r}; known: plotly, circuitsvis")
    return f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:16]}{suffix}", text


_HOME: contextvars.ContextVar[tuple[Path, tuple[Path, ...]] | None] = \
    contextvars.ContextVar("circuits_asset_home", default=None)


@contextlib.contextmanager
def asset_home(folder: str | Path, inputs: Sequence[str | Path] = ()) -> Iterator[None]:
    """Pages written below ``folder`` (a job's ``--out``) while this is open may share the copy in
    ``folder/_assets`` (``identify --task all``: one plotly.js for every task's page); without it a page looks only
    in its own folder. Never above the job's ``--out``: a page loads what its job wrote, or, as the report does, a
    copy in ``inputs/_assets``, the job's input results (``make demo``: the method's pages use identify's plotly.js,
    not a second 4.8 MB copy)."""
    token = _HOME.set((Path(folder).resolve(), tuple(Path(i).resolve() for i in inputs)))
    try:
        yield
    finally:
        _HOME.reset(token)


def _verified(path: Path, text: str) -> bool:
    """Whether ``path`` is a regular file holding exactly ``text`` (a copy someone else put there is not used)."""
    try:
        return path.is_file() and not path.is_symlink() and path.stat().st_size == len(text.encode()) \
            and path.read_bytes() == text.encode()
    except OSError:
        return False


def shared_asset(name: str, page: str | Path, *, roots: Sequence[str | Path] = (), default: str | Path | None = None) -> Path:
    """Where the shared copy of script ``name`` (``plotly`` or ``circuitsvis``) for ``page`` lies, written there if
    it is not yet. Looked for, by its content-hashed name and checked byte for byte: in the page's folder, then in
    its parents up to the open :func:`asset_home` (a job's ``--out``; none above it), then in ``roots`` (the report:
    the copies its input results hold); else written into ``default``, by default the page's own folder."""
    file, text = _asset(name)
    here = Path(page).resolve().parent
    home, inputs = _HOME.get() or (None, ())
    candidates = [here]
    if home is not None and home in here.parents:
        candidates += [p for p in here.parents if p == home or home in p.parents]
    candidates += [*inputs, *(Path(r).resolve() for r in roots)]
    for c in candidates:
        if _verified(c / ASSETS / file, text):
            return c / ASSETS / file
    if default is None:
        default = here
    path = Path(default).resolve() / ASSETS / file
    from circuits.io import output_lock, write_text

    with output_lock(path):  # what a killed write of this copy left (.<file>.circuits-tmp-*) is removed first
        if not _verified(path, text):
            write_text(path, text)
    return path


def script_tag(name: str, page: str | Path | None, *, inline: bool = False, roots: Sequence[str | Path] = (),
               default: str | Path | None = None) -> str:
    """The ``<script>`` that loads ``name`` into ``page``: inlined, or the shared copy by a relative path. The page
    is written into a temporary sibling of its folder and renamed, so the path is taken from where it will end."""
    if inline or page is None:
        text = _asset(name)[1]
        return f"<script type='text/javascript'>{text}</script>"
    page = Path(page)
    # A page written into a temporary sibling of its folder keeps its links when renamed: a copy inside the folder moves
    # with it, and one outside is as far from the sibling as from the folder.
    here = page.resolve().parent
    src = Path(os.path.relpath(shared_asset(name, page, roots=roots, default=default), here)).as_posix()
    return f"<script type='text/javascript' src='{_e(src)}'></script>"


# The vertical scrollbar's room is kept from the first paint (every page: the report, attention pages, figure pages).
# plotly sizes an autosized figure to its box when the figure's script runs, before the rest of the page has made it
# scroll; the scrollbar then took its 15 px from boxes the first figures already filled, and the faithfulness page
# scrolled sideways at 1280 px (its first three figures 1264 px wide in a 1249 px body). Browsers with overlay
# scrollbars (macOS) reserve nothing and never needed it.
GUTTER_CSS = "html{scrollbar-gutter:stable}"
NOTE_CSS = ("body>.note{font-family:system-ui,-apple-system,Segoe UI,sans-serif;background:#f6f6f2;"
            "border-left:4px solid #bbb;padding:.5em .8em;color:#555;max-width:1100px}")  # a figure page's warning
GENERATOR = "<meta name='generator' content='circuits report'>"  # lets a later report replace this file, and nothing else
CSS = GUTTER_CSS + """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1200px;margin:0 auto;padding:0 1.5em 3em;
color:#222;line-height:1.45}
h1{margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}h3{margin-bottom:.3em}
.meta{color:#666;font-size:.9em}.what{font-size:1.02em}.note{background:#f6f6f2;border-left:4px solid #bbb;
padding:.5em .8em;color:#555}details.config{font-size:.85em;color:#555;margin:.3em 0 1.2em}
details.config .provenance{color:#777}details.config pre{background:#f7f7f7;padding:.6em;max-height:20em;overflow:auto}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}th,td{border:1px solid #ddd;padding:.25em .6em;
text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.cv-view{margin:.4em 0 1.2em}div.fig{overflow-x:auto;max-width:100%}h3.prompt{white-space:pre-wrap;font-size:.95em;background:#fafafa;padding:.3em .5em}code{background:#f3f3f3;padding:0 .2em}footer{margin-top:3em;color:#888;font-size:.85em}
"""


@functools.lru_cache(maxsize=1)
def circuitsvis_bundle() -> str:
    """The circuitsvis JavaScript bundle (defines the global ``CircuitsVis``), taken from the
    self-contained ``local_src`` of a throw-away view so it matches the installed circuitsvis, with its head colours
    the toolkit's categorical palette (:func:`head_colours`)."""
    import circuitsvis as cv

    src = cv.attention.attention_heads(attention=[[[1.0]]], tokens=["x"]).local_src
    start = src.index(">", src.index("<script")) + 1
    bundle = src[start : src.rindex("CircuitsVis.render(")]
    # No source map beside the page: a browser with dev tools open would log a failed fetch.
    return head_colours(re.sub(r"//# sourceMappingURL=\S+", "", bundle).replace("</script", "<\\/script"))


# circuitsvis's head colour (AttentionHeads: each head's name tile and frame), minified in its bundle as
# function Zv(e,t,r="100%"){return`hsla(${Math.round(e/t*360)}, 70%, 50%,  ${r})`}: head 0 of n at hue 0, red
_HEAD_HUE = re.compile(r'function ([\w$]+)\((\w+),(\w+),(\w+)="100%"\)\{return`hsla\(\$\{Math\.round\(\2/\3\*360\)\}, '
                       r'70%, 50%,\s*\$\{\4\}\)`\}')


def head_colours(bundle: str) -> str:
    """``bundle`` (circuitsvis's JavaScript) with its head colour function replaced by one that takes head ``i``'s
    colour from :data:`~circuits.viz.colours.HEAD_COLOURS` (cycling), at the same opacity, so no head is drawn in
    the importance red (circuitsvis takes no colour argument for heads). A bundle without that function (another
    circuitsvis) is returned as it is, with a warning."""
    from circuits.viz.colours import HEAD_COLOURS

    m = _HEAD_HUE.search(bundle)
    if m is None:
        import warnings

        warnings.warn("circuitsvis's head colour function was not found in its bundle (another circuitsvis version?): "
                      "the attention views keep circuitsvis's own head colours, head 0 in red", stacklevel=2)
        return bundle
    name, i, _, alpha = m.groups()
    rgb = [",".join(str(int(c[k:k + 2], 16)) for k in (1, 3, 5)) for c in HEAD_COLOURS]
    js = (f'function {name}({i},_n,{alpha}="100%"){{var c={json.dumps(rgb)}[{i}%{len(rgb)}];'
          f'return "rgba("+c+","+parseFloat({alpha})/100+")"}}')
    return bundle[: m.start()] + js + bundle[m.end():]


_RENDER = re.compile(r'CircuitsVis\.render\(\s*"[^"]+",\s*CircuitsVis\.(\w+),\s*(\{.*?\})\s*\);?\s*</script>', re.S)


def parse_views(page: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(caption, component, props) of each circuitsvis view in a page written by
    :func:`circuits.explain.attention.attention_html` (a caption is the ``<h3>`` before the view)."""
    views = []
    for chunk in re.split(r"<h3(?:\s[^>]*)?>", page)[1:]:
        caption = html.unescape(chunk.split("</h3>", 1)[0])
        for m in _RENDER.finditer(chunk):
            views.append((caption, m.group(1), json.loads(m.group(2))))
    if not views:  # a page without captions
        views = [("", m.group(1), json.loads(m.group(2))) for m in _RENDER.finditer(page)]
    return views


def validity_banner(validity: Any) -> str:
    """A job's validity lines (:class:`~circuits.identify.validity.Validity`, None for a result saved before its job
    checked) as the warning at the top of its section; empty when there are none."""
    lines = validity.lines() if validity is not None else []
    if not lines:
        return ""
    forced = " (saved with --force)" if validity.forced and validity.refusals else ""
    return (f"<p class='note validity'><b>Warning{forced}:</b> " + _e("; ".join(lines)) + " (thresholds: "
            "docs/identify.md, \"Can this result be trusted?\")</p>")
