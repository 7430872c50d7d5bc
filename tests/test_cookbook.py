"""Every notebook in cookbook/ is stored with the outputs of a real run and still runs top to bottom (offline,
embedded defaults); ``python cookbook/run_all.py`` regenerates the stored outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

COOKBOOK = Path(__file__).resolve().parent.parent / "cookbook"
NOTEBOOKS = sorted(COOKBOOK.glob("*.ipynb"))
#: The headings every notebook has, in this order (the layout of the frameworks' own integration pages).
SECTIONS = ["## Overview", "## Setup", "## Instantiation", "## Usage", "## Use within", "## API reference"]


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_cookbook_is_not_empty():
    assert len(NOTEBOOKS) >= 6, "cookbook/ lost notebooks"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_with_the_outputs_of_one_run(path: Path):
    code = [c for c in _cells(path) if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for c in code]
    assert counts == list(range(1, len(code) + 1)), f"{path.name}: run it with cookbook/run_all.py ({counts})"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert outputs and not [o for o in outputs if o["output_type"] == "error"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_reads_only_the_repository_and_has_the_integration_layout(path: Path):
    cells = _cells(path)
    text = "\n".join(_source(c) for c in cells)
    for outside in ("shared/data", "FRAGREL_DATA", "locomo"):
        assert outside not in text, f"{path.name} refers to {outside!r}: read samples/ instead"
    headings = [line for c in cells if c["cell_type"] == "markdown" for line in _source(c).splitlines()]
    found = [next((i for i, h in enumerate(headings) if h.startswith(s)), None) for s in SECTIONS]
    assert None not in found and found == sorted(found), f"{path.name}: sections {SECTIONS} in order"


def test_a_plot_is_stored():
    images = [
        path.name
        for path in NOTEBOOKS
        for c in _cells(path)
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]
    assert images, "no notebook stores a plot"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path):
    pytest.importorskip("nbformat")
    import importlib.util

    spec = importlib.util.spec_from_file_location("cookbook_run_all", COOKBOOK / "run_all.py")
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    nb = run_all.execute(path, timeout=600)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
