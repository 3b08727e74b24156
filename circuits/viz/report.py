"""One shareable HTML page from saved results: ``circuits report RESULTS_DIR... --out report.html``.

Nothing here runs a model: :func:`collect` walks the given folders and loads every saved result through its
own class (:func:`circuits.results.load_result`, dispatching on the result's ``kind``), and
:func:`build_report` renders one section per step of the method (Figures 2-7 and 15, Table 1), each with a
sentence saying what it shows and the config that made it; a section with nothing in the inputs says so and
how to make it (all such sections once, grouped at the end). A folder that holds a result which cannot be read is
named with the reason.

The page opens offline: plotly.js and the circuitsvis bundle are loaded once each (not per figure) from the
shared ``_assets/`` copy beside the results, or inlined with ``inline=True``; every figure only carries its data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from circuits.io import OutputError, read_json, write_text
from circuits.results import MARKER, ResultError, check_writable, detect_kind, result_type
from circuits.timing import timed
from circuits.viz.page import GENERATOR, Page, _e
from circuits.viz.sections import SECTIONS, Found, op_rank, run_labels

MAX_DEPTH = 4


def _load(path: Path, kind: str, found: list[Found], broken: list[tuple[Path, str]]) -> None:
    try:
        result = result_type(kind).load(path)
    except (ResultError, ValueError, KeyError, TypeError, IndexError, AttributeError, RuntimeError, OSError) as err:
        broken.append((path, f"{type(err).__name__}: {err}" if not isinstance(err, (ResultError, ValueError)) else str(err)))
        return
    found.append(Found(result, path))


def _corrupt_json(folder: Path) -> str | None:
    """Why a folder's main result file cannot be read, when it is there but corrupt (else None)."""
    for name in ("summary.json", "data.json", "result.json", "config.json"):
        if (folder / name).is_file():
            try:
                read_json(folder / name)
            except ValueError as err:
                return str(err)
    return None


def collect(paths: Iterable[str | Path]) -> tuple[list[Found], list[Path], list[tuple[Path, str]]]:
    """Every result under ``paths`` (folders are walked; a result folder's sub-folders are not, hidden or
    ``_``-prefixed ones are skipped, and a symbolic link inside them is never followed), the folders with a ``config.json`` that hold no known result, and the
    results that could not be read, with why."""
    found: list[Found] = []
    unknown: list[Path] = []
    broken: list[tuple[Path, str]] = []

    def walk(folder: Path, depth: int) -> None:
        try:
            kind = detect_kind(folder)
        except (ResultError, ValueError) as err:  # a corrupt marker
            broken.append((folder, str(err)))
            return
        if kind is not None:
            _load(folder, kind, found, broken)
            return
        corrupt = _corrupt_json(folder)
        if corrupt:
            broken.append((folder, corrupt))
            return
        if (folder / "config.json").is_file() or (folder / "summary.json").is_file():
            unknown.append(folder)
        if depth >= MAX_DEPTH:
            return
        for child in sorted(folder.iterdir()):
            if child.is_symlink():  # never followed: a link to / made the report walk the whole disk (issue 41)
                continue
            if child.is_dir() and not child.name.startswith((".", "_")):
                walk(child, depth + 1)
            elif child.suffix == ".json" and depth == 0 and child.name not in ("config.json", MARKER):
                _file(child)

    def _file(path: Path) -> None:
        try:
            found.append(Found(result_type("evaluate").load(path), path))
        except (ResultError, ValueError, OSError):
            pass  # a JSON file that is no evaluation result (or no regular file at all: a FIFO, a link to a device)

    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"no such results folder or file: {p}")
        if p.is_dir():
            walk(p, 0)
        elif p.name in ("summary.json", "data.json", "result.json", MARKER):
            walk(p.parent, 0)
        else:
            _file(p)
    unique: dict[tuple[str, Path], Found] = {}
    for f in found:  # the same folder given twice, or a folder and its file
        unique.setdefault((f.kind, f.path.resolve()), f)
    return list(unique.values()), unknown, broken


# RuntimeError: torch's own shape errors (a tensor of another size met in a figure)
_DRAW_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError, RuntimeError)


def _render(section, page: Page, mine: list[Found], broken: list[tuple[Path, str]]) -> str:  # noqa: ANN001
    """A section's HTML; a result whose values it cannot draw (a string where a number is) is listed as
    unreadable, with why, and the section drawn from the rest."""
    try:
        return section.render(page, mine)
    except _DRAW_ERRORS:
        pass
    good = []
    for f in mine:
        try:
            section.render(Page(page.title), [f])
            good.append(f)
        except _DRAW_ERRORS as err:
            broken.append((f.path, f"its values cannot be drawn ({type(err).__name__}: {err})"))
    return section.render(page, good) if good else ""


def own_how(how: str, found: list[Found]) -> str:
    """A skipped section's command with the reader's own identify folder and model in place of the README's
    ``results/identify/addition`` and ``--model smollm2``, where the inputs hold an identify result (addition's first)."""
    ids = sorted((f for f in found if f.kind == "identify"), key=op_rank)
    if not ids:
        return how
    model = ids[0].config.get("model")
    how = how.replace("results/identify/addition", str(ids[0].path))
    return how.replace("--model smollm2", f"--model {model}") if isinstance(model, str) and model else how


def build_report(paths: Sequence[str | Path], title: str = "circuits report", *, out: str | Path | None = None,
                 inline: bool | None = None) -> str:
    """The report's HTML for the results under ``paths``; raises ValueError when none can be read.

    For a page to be written at ``out``, plotly.js and circuitsvis are the shared copies in an ``_assets/`` folder
    (one already beside the inputs is reused) loaded by a relative path; ``inline=True``, or no ``out``, embeds
    them (a single file, about 6 MB heavier)."""
    found, unknown, broken = collect(paths)
    if not found:
        why = "; ".join(f"{p}: {reason}" for p, reason in broken)
        raise ValueError(f"no results found under {', '.join(map(str, paths))}" + (f" (unreadable: {why})" if why else
                         " (expected folders written by circuits identify, experiments/*.py or the fine-tuning jobs)"))
    found = run_labels(found)  # results of one kind and task are told apart by what differs in what made them
    page = Page(title)
    skipped = []
    for s in SECTIONS:  # every section lists its operations in the key-heads heat maps' order
        mine = sorted((f for f in found if f.kind in s.kinds), key=op_rank)
        body = _render(s, page, mine, broken) if mine else ""
        if body:
            page.add(s.anchor, s.heading, body)
        else:
            skipped.append(s)
    if skipped:  # said once, grouped, at the end: what each missing section is and the command that makes it
        page.add("not-run", f"Not in the inputs ({len(skipped)} sections)", "<p class='note'>These steps were not run "
                 "for the results given, so the report skips them. Make one and pass its folder to <code>circuits "
                 "report</code>:</p>" + "<ul class='skipped'>" + "".join(
                     f"<li>{_e(s.heading)}: <code>{_e(own_how(s.how, found))}</code></li>" for s in skipped) + "</ul>")
    if broken:
        page.add("unreadable", "Results that could not be read", "<p class='note'>" + "<br>".join(
            f"<code>{_e(p)}</code>: {_e(reason)}" for p, reason in broken) + "</p>")
    if unknown:
        page.add("other", "Other results (not shown)", "<p class='note'>These folders hold results this report does not "
                 "draw: " + ", ".join(f"<code>{_e(u)}</code>" for u in unknown) + "</p>")
    roots = [Path(p) if Path(p).is_dir() else Path(p).parent for p in paths]
    roots += [f.path.parent for f in found]
    if out is not None:  # an input's copy only where it lies inside the page's own folder: the page moves with it
        home = Path(out).resolve().parent
        roots = [r for r in roots if r.resolve() == home or home in r.resolve().parents]
    return page.render([str(p) for p in paths], out, inline=out is None or bool(inline), roots=roots)


def check_report_output(out: str | Path, overwrite: bool = False) -> Path:
    """A report may replace an earlier report, nothing else (unless ``overwrite``)."""
    out = Path(out)
    if out.is_dir():
        raise OutputError(f"--out {out} is a folder; name the HTML file to write, e.g. {out / 'report.html'}")
    if out.exists() and not overwrite:
        with open(out, "rb") as f:
            head = f.read(512)
        if GENERATOR.encode() not in head:
            raise OutputError(f"--out {out} exists and is not a report written by circuits report; choose another "
                              "--out, or pass --overwrite to replace it")
    check_writable(out)
    return out


@timed("report")
def write_report(paths: Sequence[str | Path], out: str | Path, title: str = "circuits report", *,
                 overwrite: bool = False, inline: bool = False) -> Path:
    """Build the report and write it atomically to ``out`` (checked first: an existing file is replaced only when it
    is an earlier report). Its JavaScript is shared in ``_assets/`` beside the results unless ``inline``."""
    check_report_output(out, overwrite)
    return write_text(out, build_report(paths, title, out=out, inline=inline))
