"""The notebooks run top to bottom (their cells assert what they show)."""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


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


def _extra_closure(extras: dict, name: str, seen: set | None = None) -> set[str]:
    """The distributions ``sparklog[name]`` installs, its nested extras followed."""
    seen = set() if seen is None else seen
    found: set[str] = set()
    for req in extras[name]:
        dist = re.match(r"[A-Za-z0-9_.\-]+", req).group(0).lower().replace("_", "-")
        nested = re.search(r"\[(.*)\]", req)
        if dist == "sparklog" and nested:
            for sub in nested.group(1).split(","):
                if sub not in seen:
                    seen.add(sub)
                    found |= _extra_closure(extras, sub.strip(), seen)
        else:
            found.add(dist)
    return found


def test_all_extra_runs_the_notebooks():
    """``pip install 'sparklog[all]'`` installs every third-party package the notebooks
    import (matplotlib was missing): each top-level import of a code cell that is not
    the standard library or sparklog itself belongs to a distribution of the closure."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = _extra_closure(project["optional-dependencies"], "all")
    installed |= {re.match(r"[A-Za-z0-9_.\-]+", r).group(0).lower()
                  for r in project["dependencies"]}
    # what the listed distributions pull in themselves (numpy comes with pyarrow and pandas)
    installed |= {"numpy"}
    providers = importlib.metadata.packages_distributions()
    missing = {}
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for line in "".join(cell["source"]).splitlines():
                m = re.match(r"\s*(?:import|from)\s+([A-Za-z_][\w]*)", line)
                if not m or m.group(1) in sys.stdlib_module_names or m.group(1) == "sparklog":
                    continue
                dists = {d.lower() for d in providers.get(m.group(1), [m.group(1)])}
                if not dists & installed:
                    missing[m.group(1)] = path.name
    assert not missing, f"sparklog[all] does not install what the notebooks import: {missing}"
