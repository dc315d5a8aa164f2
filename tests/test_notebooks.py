"""The notebooks run top to bottom (their cells assert what they show)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.spark
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (extra 'notebook')")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (extra 'notebook')")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed (extra 'notebook')")
    scratch = tmp_path / "tmp"  # the notebook's own temporary directory goes here
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.delenv("SPARKLOG_NOTEBOOK_ROOT", raising=False)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) >= 3, "the tour's plots were not rendered"
    left = sorted(p.name for p in scratch.iterdir() if p.name.startswith("sparklog-nb-"))
    assert not left, f"the notebook left its temporary directory behind: {left}"
