"""Running a notebook headless, in one place: :func:`execute` runs a notebook's code cells under the workbook's
environment switches (:func:`switches`) and writes the executed copy atomically (a reader finds the previous copy
or the whole new one, never half of one). A failing cell stops the run with :class:`NotebookFailed`, which names
the notebook and the cell; the copy is written first, with the outputs up to the failing cell and its error.

One function, two modes:

``"kernel"``
    the ``.ipynb`` in a Jupyter kernel of this Python environment (nbclient), the notebook's folder as working
    directory: what ``make lab`` (``scripts/run_workbook.py``) runs.
``"in_process"``
    the paired percent-format ``.py`` (jupytext) cell by cell in this process, in one scope, a last bare
    expression shown as Jupyter shows it, the notebook's folder as working directory (restored after), matplotlib
    on Agg: for a machine without Jupyter (the GPU check, :mod:`peagle_lab.tools.gpu_check`). Only what the cells
    print is kept (a failing cell's traceback also goes to stderr); the copy is the paired ``.ipynb`` (else the source's code cells) with each code cell's outputs
    replaced by that text. ``timeout`` is not enforced here: the GPU check runs each notebook in a process of its
    own with a time limit.

``make test``'s nbval run (``pytest --nbval-lax``) is a test harness, not an execution path: it runs the notebooks
to compare their outputs and writes no copy.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..atomic import write_text
from ..errors import PeagleError
from ..settings import RESULTS_ENV, display_path, results_dir

MODES = ("kernel", "in_process")


@dataclass
class Executed:
    """A notebook that ran to its end: the executed copy, the seconds it took, per code cell ``(tags, printed
    text)`` (:func:`printed`), and how many stderr outputs went to the log beside the copy (:func:`move_stderr`)."""

    copy: Path
    seconds: float
    outputs: list[tuple[list[str], str]] = field(default_factory=list)
    stderr_moved: int = 0


class NotebookFailed(PeagleError):
    """A notebook stopped at a cell (or its kernel died): ``notebook``, ``cell`` (the code cell's number, from 1;
    None when no cell had started), ``error`` (one line) and the executed copy, written before this was raised."""

    def __init__(self, notebook: Path, cell: int | None, source: str, error: str, copy: Path, seconds: float):
        self.notebook, self.cell, self.error, self.copy, self.seconds = notebook, cell, error, copy, seconds
        first = next((line.strip() for line in source.splitlines() if line.strip()), "")
        where = f"code cell {cell} (`{first[:60]}`)" if cell else "before its first cell"
        super().__init__(f"{display_path(notebook)} stopped at {where}: {error}. Fix: read the traceback in the "
                         f"executed copy {display_path(copy)}, mend that cell (or what it calls) and run it again.")


def switches(name: str, ci: bool | None = None, in_process: bool = False) -> dict[str, str]:
    """The environment a notebook runs under: ``PEAGLE_NOTEBOOK`` (``report.record`` files its numbers under it),
    passive OpenMP waiting unless set, ``PEAGLE_RESULTS`` absolute (the kernel's working folder is the notebook's),
    ``PEAGLE_CI`` when ``ci`` is given, and matplotlib on Agg in process (no inline backend there) unless set."""
    env = {"PEAGLE_NOTEBOOK": name, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
           RESULTS_ENV: str(results_dir().resolve())}
    if ci is not None:
        env["PEAGLE_CI"] = "1" if ci else "0"
    if in_process:
        env["MPLBACKEND"] = os.environ.get("MPLBACKEND", "Agg")
    return env


@contextlib.contextmanager
def _environment(env: dict[str, str], cwd: Path | None = None) -> Iterator[None]:
    """``env`` set (and ``cwd`` entered) for the block; what was there before is put back after."""
    before = {k: os.environ.get(k) for k in env}
    here = Path.cwd()
    os.environ.update(env)
    try:
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(here)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def execute(notebook, out_dir, mode: str = "kernel", ci: bool | None = None, timeout: int = 3600,
            kernel: str = "python3") -> Executed:
    """Run ``notebook`` (either file of a jupytext pair: the mode picks which runs) under :func:`switches` and
    write the executed copy to ``out_dir/<name>.ipynb`` atomically (stderr outputs moved to ``<name>.stderr.txt``
    beside it). ``timeout``: seconds per cell, and ``kernel``: the kernel's name (``python3`` is this Python), in
    the ``kernel`` mode. Raises :class:`NotebookFailed` when a cell fails, after writing the copy."""
    if mode not in MODES:
        raise PeagleError(f"unknown notebook mode {mode!r}. Fix: one of {', '.join(MODES)}.")
    path = Path(notebook).resolve()
    source = path.with_suffix(".ipynb" if mode == "kernel" else ".py")
    if not source.is_file():
        raise PeagleError(f"{display_path(source)} does not exist (the {mode} mode runs it). Fix: give a notebook "
                          "of notebooks/, or sync the pair with `jupytext --sync`.")
    out_dir = Path(out_dir)
    copy = out_dir / f"{path.stem}.ipynb"
    start = time.perf_counter()
    with _environment(switches(path.stem, ci, mode == "in_process"), path.parent):
        nb, failure = (_run_kernel(source, timeout, kernel) if mode == "kernel" else _run_in_process(source))
    seconds = time.perf_counter() - start
    moved = move_stderr(nb, out_dir / f"{path.stem}.stderr.txt")
    write_text(copy, json.dumps(nb, indent=1, sort_keys=True, separators=(",", ": "), ensure_ascii=False) + "\n")
    if failure is not None:
        raise NotebookFailed(source, *failure, copy=copy, seconds=seconds)
    outputs = [(c.get("metadata", {}).get("tags", []), printed(c)) for c in nb["cells"] if c["cell_type"] == "code"]
    return Executed(copy, seconds, outputs, moved)


def printed(cell: dict) -> str:
    """What a code cell showed as text: its stdout streams and its result's ``text/plain``, in order."""
    return "".join("".join(o.get("text", "")) if o["output_type"] == "stream" and o.get("name") == "stdout"
                   else "".join(o.get("data", {}).get("text/plain", "")) + "\n"
                   if o["output_type"] == "execute_result" else "" for o in cell.get("outputs", []))


def _code_number(cells: list, index: int) -> int:
    """The 1-based number among the code cells of the cell at ``index``."""
    return sum(1 for c in cells[: index + 1] if c.get("cell_type") == "code")


def _run_kernel(source: Path, timeout: int, kernel: str) -> tuple[dict, tuple | None]:
    """The ``.ipynb`` in a kernel: the executed notebook (as a dict) and, when it stopped, ``(cell, source,
    error)`` for :class:`NotebookFailed`."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(source, as_version=4)
    current = {"index": None}
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel,
                            resources={"metadata": {"path": str(source.parent)}},
                            on_cell_start=lambda cell, cell_index: current.update(index=cell_index))
    failure = None
    try:
        client.execute()
    except Exception as exc:  # a cell's error, a timeout, a dead or missing kernel: all stop the notebook
        i = current["index"]
        error = f"{exc.ename}: {exc.evalue}" if isinstance(exc, CellExecutionError) else \
            f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[-1]}"
        failure = (None if i is None else _code_number(nb.cells, i), "" if i is None else nb.cells[i].source,
                   error.replace("\n", " ")[:300])
    return json.loads(nbformat.writes(nb)), failure


def code_cells(source: str) -> list[tuple[list[str], str]]:
    """The code cells of a jupytext percent-format source, in order: ``(tags, code)`` (markdown cells and the
    header before the first cell left out)."""
    import re

    cells, tags, lines, is_code = [], [], [], False
    for line in source.splitlines(keepends=True):
        if line.startswith("# %%"):
            if is_code:
                cells.append((tags, "".join(lines)))
            is_code, lines = "[markdown]" not in line, []
            found = re.search(r"tags=\[(.*?)\]", line)
            tags = re.findall(r'"([^"]+)"', found.group(1)) if found else []
        else:
            lines.append(line)
    if is_code:
        cells.append((tags, "".join(lines)))
    return cells


def _run_cell(code: str, scope: dict, filename: str, buf) -> None:
    """Run one cell in ``scope`` as Jupyter would (a last bare expression shown); what it prints goes to ``buf``
    and this process's stdout."""
    import ast
    import io

    tree = ast.parse(code, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None

    class Tee(io.TextIOBase):
        def write(self, text):
            sys.__stdout__.write(text)
            return buf.write(text)

    with contextlib.redirect_stdout(Tee()):
        exec(compile(tree, filename, "exec"), scope)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), filename, "eval"), scope)
            if value is not None:
                print(repr(value))


def _run_in_process(source: Path) -> tuple[dict, tuple | None]:
    """The percent-format source cell by cell in one scope: the executed notebook (as a dict) and, when a cell
    raised, ``(cell, source, error)`` for :class:`NotebookFailed`. Cells after a failing one are left unrun."""
    import io

    cells = code_cells(source.read_text())
    scope = {"__name__": "__main__", "__file__": str(source)}
    outputs, failure = [], None
    for n, (_, code) in enumerate(cells, 1):
        buf = io.StringIO()
        try:
            _run_cell(code, scope, str(source), buf)
        except Exception as exc:  # the notebook stops here, as a kernel's run does; its traceback on stderr
            traceback.print_exc()
            error = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
            outputs.append(_outputs(buf.getvalue(), exc))
            failure = (n, code, error)
            break
        outputs.append(_outputs(buf.getvalue()))
    return _copy_of(source, cells, outputs), failure


def _outputs(text: str, exc: BaseException | None = None) -> list[dict]:
    """A code cell's outputs in the notebook format: what it printed, then its error."""
    outs = [{"output_type": "stream", "name": "stdout", "text": text}] if text else []
    if exc is not None:
        outs.append({"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc),
                     "traceback": traceback.format_exception(type(exc), exc, exc.__traceback__)})
    return outs


def _copy_of(source: Path, cells: list, outputs: list[list[dict]]) -> dict:
    """The executed copy of an in-process run: the paired ``.ipynb`` when its code cells match the source's
    (else the source's code cells alone), each code cell given its outputs; cells not reached have none."""
    pair = source.with_suffix(".ipynb")
    nb = json.loads(pair.read_text()) if pair.is_file() else None
    if nb is None or sum(c["cell_type"] == "code" for c in nb["cells"]) != len(cells):
        nb = {"cells": [{"cell_type": "code", "metadata": {"tags": tags} if tags else {}, "source": code}
                        for tags, code in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for i, cell in enumerate(code):
        cell["outputs"] = outputs[i] if i < len(outputs) else []
        cell["execution_count"] = i + 1 if i < len(outputs) else None
    return nb


def _is_progress_widget(out) -> bool:
    # a tqdm bar rendered as a widget: its saved text fallback is the bar's first state ("0/40"), frozen
    data = out.get("data", {}) if out.get("output_type") == "display_data" else {}
    text = "".join(data.get("text/plain", ""))
    return "application/vnd.jupyter.widget-view+json" in data and "%|" in text and "[" in text


def move_stderr(nb, log_path: Path) -> int:
    """Take the stderr streams (library warnings, log lines, text progress bars) and tqdm's progress widgets
    (live while a cell runs; saved, only their frozen first state) out of the saved notebook and into
    ``log_path``: the committed outputs keep what the cells print, the log keeps the rest. Returns the count."""
    moved = []
    for i, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") != "code":
            continue
        keep = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                moved.append(f"--- cell {i}\n{''.join(out.get('text', ''))}")
            elif _is_progress_widget(out):
                moved.append(f"--- cell {i}\n{''.join(out['data']['text/plain'])}")
            else:
                keep.append(out)
        cell["outputs"] = keep
    if moved:
        write_text(log_path, "\n".join(moved))
    return len(moved)
