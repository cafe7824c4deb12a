"""Execute every notebook in ``notebooks/`` top to bottom (skip with ``-m "not notebook"``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    # Stored outputs are stripped in git.
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name
    os.environ.setdefault("MPLBACKEND", "Agg")
    # no wall-clock assertion (a cold Numba cache in a fresh CI venv, or a loaded machine, is
    # slow, not wrong); nbclient's per-cell timeout only guards against a hung kernel
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
