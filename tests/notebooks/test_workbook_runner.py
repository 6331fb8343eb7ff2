"""The one notebook runner (``peagle_lab.workbook.execute``), in both its modes: it writes the executed copy, a failing
cell stops the run with an error naming the notebook and the cell (the copy still written, the cells after it not
run), a copy is never left half-written, and the saved notebook keeps what the cells print while stderr streams and
tqdm's progress widgets go to a log beside it. ``make lab``'s script runs notebooks through it."""

import importlib.util
import json
import os
from pathlib import Path

import nbformat
import pytest

from peagle_lab.errors import PeagleError
from peagle_lab.workbook import execute as runner

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "run_workbook.py"
PASSING = ["x = 6 * 7", "import os\nprint('x is', x, os.environ['PEAGLE_NOTEBOOK'])", "x + 1"]
FAILING = ["x = 1", "print('before')\ny = x / 0", "print('never')"]


def _pair(folder: Path, name: str, cells: list[str]) -> Path:
    """A jupytext pair built here: ``name.py`` (percent format) and ``name.ipynb``, a markdown cell first."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title")]
                                  + [nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / f"{name}.ipynb")
    (folder / f"{name}.py").write_text("# %% [markdown]\n# # Title\n\n" + "".join(f"# %%\n{c}\n\n" for c in cells))
    return folder / f"{name}.ipynb"


def _code_cells(copy: Path) -> list[dict]:
    return [c for c in json.loads(copy.read_text())["cells"] if c["cell_type"] == "code"]


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("PEAGLE_RESULTS", str(tmp_path / "results"))
    monkeypatch.delenv("PEAGLE_NOTEBOOK", raising=False)


def test_in_process_run_writes_the_executed_copy_and_leaves_the_process_as_it_was(tmp_path, results):
    path = _pair(tmp_path, "00_ok", PASSING)
    here = Path.cwd()
    done = runner.execute(path, tmp_path / "out", mode="in_process")
    assert done.copy == tmp_path / "out" / "00_ok.ipynb"
    cells = _code_cells(done.copy)
    assert [c["execution_count"] for c in cells] == [1, 2, 3]
    assert [runner.printed(c) for c in cells] == ["", "x is 42 00_ok\n", "43\n"]
    assert [text for _, text in done.outputs] == ["", "x is 42 00_ok\n", "43\n"]
    assert Path.cwd() == here and "PEAGLE_NOTEBOOK" not in os.environ  # the switches hold for the run only


def test_in_process_failing_cell_names_the_notebook_and_cell_and_keeps_the_copy(tmp_path, results):
    path = _pair(tmp_path, "01_broken", FAILING)
    with pytest.raises(runner.NotebookFailed, match=r"01_broken\.py stopped at code cell 2 \(`print\('before'\)`\): "
                                                    r"ZeroDivisionError") as caught:
        runner.execute(path, tmp_path / "out", mode="in_process")
    assert caught.value.cell == 2 and caught.value.copy == tmp_path / "out" / "01_broken.ipynb"
    first, failed, after = _code_cells(caught.value.copy)
    assert failed["outputs"][0]["text"] == "before\n" and failed["outputs"][1]["ename"] == "ZeroDivisionError"
    assert after["outputs"] == [] and after["execution_count"] is None  # not run after the failure


@pytest.mark.slow
def test_kernel_run_writes_the_copy_and_a_failing_cell_stops_it_by_name(tmp_path, results):
    """Two notebooks in a Jupyter kernel of this Python, as ``make lab`` runs them."""
    done = runner.execute(_pair(tmp_path, "00_ok", PASSING), tmp_path / "out", timeout=120)
    assert [runner.printed(c) for c in _code_cells(done.copy)] == ["", "x is 42 00_ok\n", "43\n"]
    with pytest.raises(runner.NotebookFailed, match=r"01_broken\.ipynb stopped at code cell 2 .*ZeroDivisionError"):
        runner.execute(_pair(tmp_path, "01_broken", FAILING), tmp_path / "out", timeout=120)
    first, failed, after = _code_cells(tmp_path / "out" / "01_broken.ipynb")
    assert any(o["output_type"] == "error" for o in failed["outputs"]) and after["outputs"] == []


def test_a_copy_that_cannot_be_written_leaves_the_previous_one_whole(tmp_path, results, monkeypatch):
    path = _pair(tmp_path, "00_ok", PASSING)
    copy = tmp_path / "out" / "00_ok.ipynb"
    copy.parent.mkdir()
    copy.write_text("the previous copy")

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(PeagleError, match="No space left on device.*the previous file, if any, is intact"):
        runner.execute(path, tmp_path / "out", mode="in_process")
    assert copy.read_text() == "the previous copy" and os.listdir(copy.parent) == ["00_ok.ipynb"]


def test_an_unknown_mode_or_a_missing_source_is_one_clear_error(tmp_path):
    path = _pair(tmp_path, "00_ok", PASSING)
    with pytest.raises(PeagleError, match="unknown notebook mode 'ipython'"):
        runner.execute(path, tmp_path / "out", mode="ipython")
    path.with_suffix(".py").unlink()
    with pytest.raises(PeagleError, match=r"00_ok\.py does not exist.*jupytext --sync"):
        runner.execute(path, tmp_path / "out", mode="in_process")


def test_the_workbook_script_records_a_failing_notebook_and_goes_on(tmp_path, results):
    spec = importlib.util.spec_from_file_location("run_workbook", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    row = script.run_one(tmp_path / "missing.ipynb", tmp_path / "out", timeout=60, kernel="python3", html=False)
    assert row["status"] == "FAILED" and "missing.ipynb does not exist" in row["error"]


def test_stderr_and_progress_widgets_leave_the_saved_notebook(tmp_path):
    view = {"model_id": "abc", "version_major": 2, "version_minor": 0}
    out = nbformat.v4.new_output
    cell = nbformat.v4.new_code_cell("work()")
    cell.outputs = [
        out("stream", name="stdout", text="result 42\n"),
        out("stream", name="stderr", text="UserWarning: something\n"),
        out("display_data", data={"application/vnd.jupyter.widget-view+json": view,
                                  "text/plain": "train parallel:   0%|          | 0/40 [00:00<?, ?step/s]"}),
        out("display_data", data={"application/vnd.jupyter.widget-view+json": view,
                                  "text/plain": "VBox(children=(HTML(value='explorer'),))"}),
    ]
    nb = nbformat.v4.new_notebook(cells=[cell])
    log = tmp_path / "nb.stderr.txt"
    assert runner.move_stderr(nb, log) == 2
    kept = nb.cells[0].outputs
    assert [o.get("text") or o["data"]["text/plain"] for o in kept] == [
        "result 42\n", "VBox(children=(HTML(value='explorer'),))"]
    assert "UserWarning" in log.read_text() and "0/40" in log.read_text()


def test_a_workbook_run_forgets_every_chapters_earlier_records_before_the_first_runs(tmp_path, results, monkeypatch):
    from peagle_lab.workbook import report

    spec = importlib.util.spec_from_file_location("run_workbook", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    books = tmp_path / "books"
    books.mkdir()
    for name in ("01_a", "02_b"):
        _pair(books, name, ["x = 1"])
        report.record("stale", 1, notebook=name)
    report.record("kept", 1, notebook="other")
    report.record("ci-size row", 1, notebook=report.UNKNOWN)  # recorded under nbval: no chapter's
    seen = {}

    def fake_run(path, out_dir, timeout, kernel, html):
        seen[path.stem] = sorted(report.load())  # what a chapter reading the summary would find
        report.record("fresh", 2, notebook=path.stem)
        return {"name": path.stem, "status": "ok", "seconds": 0.0, "figures": 0, "error": ""}

    monkeypatch.setattr(script, "run_one", fake_run)
    monkeypatch.setenv("OMP_WAIT_POLICY", os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    monkeypatch.setenv("PEAGLE_RESULTS", os.environ["PEAGLE_RESULTS"])
    assert script.main(["--notebooks", str(books), "--out", str(tmp_path / "out"), "--no-html"]) == 0
    assert seen == {"01_a": ["other"], "02_b": ["01_a", "other"]}, "a later chapter's stale rows were visible"
    assert report.load()["02_b"] == {"fresh": 2}
