"""The headless workbook runner keeps the saved notebooks clean: stderr streams and tqdm's progress widgets (whose
saved text is their frozen first state) go to a log beside them; what the cells print, and other widgets, stay."""

import importlib.util
from pathlib import Path

import nbformat

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "run_workbook.py"


def _runner():
    spec = importlib.util.spec_from_file_location("run_workbook", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    assert _runner().move_stderr(nb, log) == 2
    kept = nb.cells[0].outputs
    assert [o.get("text") or o["data"]["text/plain"] for o in kept] == [
        "result 42\n", "VBox(children=(HTML(value='explorer'),))"]
    assert "UserWarning" in log.read_text() and "0/40" in log.read_text()
