"""docs/tour.ipynb runs top to bottom (small size: ``TOUR_PAIRS=8``) without errors, every plotly output carries a
static PNG beside the interactive figure, and the committed notebook holds its outputs (GitHub and nbviewer show
them without running anything)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_tour_notebook_runs(monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    # The kernel inherits the environment: the size knobs, and one thread on a shared CPU.
    monkeypatch.setenv("TOUR_PAIRS", os.environ.get("TOUR_PAIRS", "8"))
    monkeypatch.setenv("TOUR_SFT_STEPS", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "2"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(ROOT / "docs" / "tour.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # figures render inline: plotly figures and the circuitsvis view leave rich outputs
    rich = [o for o in outputs if o.output_type in ("display_data", "execute_result")]
    plotly = [o for o in rich if "application/vnd.plotly.v1+json" in o.data]
    assert len(plotly) >= 4 and all("image/png" in o.data for o in plotly)  # a static fallback for each
    views = [o for o in rich if "<iframe srcdoc" in o.data.get("text/html", "")]
    assert len(views) == 1 and len(views[0].data["text/plain"]) < 200  # the attention view, never megabytes of text
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "key heads (layer, head)" in text and "loss per step" in text and "attn.W_Q: rows" in text and "delta.pt:" in text


def test_committed_tour_has_outputs():
    """The tour is committed executed: every code cell that displays something has its output, plotly figures with
    their PNG, and no errors."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(ROOT / "docs" / "tour.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs for c in code[1:]), [c.source[:40] for c in code[1:] if not c.outputs]
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    plotly = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(plotly) >= 4 and all("image/png" in o["data"] for o in plotly)
