"""The asset rule for a report written to a file (issue 30: ``circuits report --out docs/r.html`` wrote a 4.7 MB
``docs/_assets/``): the page loads plotly.js from the page's own folder -- its ``--out`` is a file, so its folder is
what it writes into -- by a content-hashed name whose bytes are checked, never from above; ``--inline`` writes one
self-contained file and no ``_assets/``."""

from __future__ import annotations

import hashlib
import re

from result_cases import write_identify

from circuits.cli import main


def test_a_file_out_gets_its_assets_beside_it_by_content_hash_or_inline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_identify(tmp_path / "res")
    assert main(["report", "res", "--out", "docs/r.html"]) == 0
    page = (tmp_path / "docs" / "r.html").read_text()
    src = re.findall(r"<script type='text/javascript' src='([^']+)'", page)
    assert src and all(s.startswith("_assets/") for s in src)  # inside the page's folder, never ../
    assets = sorted((tmp_path / "docs" / "_assets").iterdir())
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["_assets", "r.html"]
    for a in assets:
        digest = re.search(r"-([0-9a-f]{16,64})\.min\.js$", a.name)
        assert digest and hashlib.sha256(a.read_bytes()).hexdigest().startswith(digest.group(1)), a.name
    # a copy with the right name and other bytes is replaced by the right one, not loaded
    assets[0].write_text("alert('not plotly')")
    assert main(["report", "res", "--out", "docs/r.html"]) == 0
    assert "alert(" not in assets[0].read_text()
    assert main(["report", "res", "--out", "mail/r.html", "--inline"]) == 0
    assert sorted(p.name for p in (tmp_path / "mail").iterdir()) == ["r.html"]
    assert "src='_assets" not in (tmp_path / "mail" / "r.html").read_text()
