"""Every notebook is a jupytext pair: ``notebooks/NN_name.py`` (percent format, the source people edit and
review) and ``notebooks/NN_name.ipynb`` (the same cells with their executed outputs). The pair must agree."""

from pathlib import Path

import jupytext
import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks_and_each_has_its_source():
    assert len(NOTEBOOKS) >= 7
    missing = [nb.name for nb in NOTEBOOKS if not nb.with_suffix(".py").exists()]
    assert not missing, f"no percent-format source for {missing}: run `jupytext --set-formats ipynb,py:percent`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_pair_is_in_sync(path):
    text = jupytext.read(path.with_suffix(".py"))
    nb = nbformat.read(path, as_version=4)
    a = [(c.cell_type, c.source.strip()) for c in text.cells]
    b = [(c.cell_type, c.source.strip()) for c in nb.cells]
    assert a == b, (f"{path.name} and its .py differ (first at cell "
                    f"{next(i for i, (x, y) in enumerate(zip(a + [None], b + [None])) if x != y)}): run "
                    f"`jupytext --sync {path.with_suffix('.py').name}` and re-execute the notebook")
    assert "py:percent" in nb.metadata.get("jupytext", {}).get("formats", "")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_is_saved_with_the_peagle_lab_kernel(path):
    """The kernel `make setup` and docs/sagemaker.md install; another name opens on a Python without the project."""
    assert nbformat.read(path, as_version=4).metadata["kernelspec"]["name"] == "peagle-lab"
    assert "name: peagle-lab" in path.with_suffix(".py").read_text().split("# ---", 2)[1]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_nbval_markers_are_cell_tags_kept_in_both_files(path):
    """`nbval-check-output` / `nbval-ignore-output` are cell tags (`# %% tags=[...]` in the .py), never comments in
    the code, and the .py and the .ipynb carry the same tags."""
    text = jupytext.read(path.with_suffix(".py"))
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        assert "NBVAL_" not in cell.source, f"{path.name}: an nbval comment marker; make it a cell tag"
    assert [c.metadata.get("tags", []) for c in text.cells] == [c.metadata.get("tags", []) for c in nb.cells]
    assert any("nbval-check-output" in c.metadata.get("tags", []) for c in nb.cells)
