"""Rewrite the marked tables of docs/results.md from the experiment scripts' saved results.

Each script writes ``published.json`` beside its result (experiments/_tables.py); this finds every one under
``--results``, renders its tables and replaces the blocks of the same name in the document
(``<!-- table: NAME -->`` ... ``<!-- /table -->``). Blocks with no saved result stay as they are, and tables with
no block (a result saved under another name) are left out; both are listed.

    python experiments/publish.py                    # results/ -> docs/results.md
    python experiments/publish.py --check            # exit 1, naming the tables, where the document differs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _tables as T

ROOT = Path(__file__).resolve().parent.parent


def collect(results: Path) -> dict[str, tuple[Path, str]]:
    """Every published table under ``results``: name -> (the published.json it came from, its markdown)."""
    found: dict[str, tuple[Path, str]] = {}
    for path in sorted(results.rglob(T.PUBLISHED)):
        for name, table in T.read_published(path).items():
            if name in found:
                raise ValueError(f"table {name!r} is published by both {found[name][0]} and {path}; keep one "
                                 "(a script run with another --out writes its tables there too)")
            found[name] = (path, T.render(table))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=str(ROOT / "results"), help="where the scripts saved their results")
    parser.add_argument("--doc", default=str(ROOT / "docs" / "results.md"))
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a block differs")
    args = parser.parse_args(argv)
    doc, results = Path(args.doc), Path(args.results)
    if not results.is_dir():
        parser.error(f"--results {results}: no such folder; accepted: the folder the scripts wrote (--out's parent)")
    try:
        text = doc.read_text(encoding="utf-8")
        marked = T.blocks(text)
        found = collect(results)
    except (OSError, ValueError) as e:
        print(f"publish: {e}", file=sys.stderr)
        return 2
    changed = [n for n, (_, md) in found.items() if n in marked and marked[n] != md]
    for name in sorted(found):
        state = "changed" if name in changed else "same" if name in marked else "unused"
        print(f"{name:<24} {state:<8} {found[name][0]}{'' if name in marked else f' (no block in {doc.name})'}")
    for name in sorted(set(marked) - set(found)):
        print(f"{name:<24} {'kept':<8} (no saved result under {results})")
    if args.check:
        return 1 if changed else 0
    if changed:
        new = T.replace_blocks(text, {n: md for n, (_, md) in found.items() if n in marked})
        tmp = doc.with_name(f".{doc.name}-tmp")
        tmp.write_text(new, encoding="utf-8")
        tmp.replace(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
