"""Key numbers a notebook wants in the workbook summary (``build/workbook/SUMMARY.md``).

``record("acceptance_length_k4", 2.31)`` appends to ``$PEAGLE_RESULTS/summary.json`` under the notebook's name;
``scripts/run_workbook.py`` reads it back with ``load()``. The file is rewritten atomically (temporary file, then
``os.replace``), so a reader never sees half a file. Writers are not locked against each other: run one
notebook at a time per results directory.

Layout of ``summary.json``: ``{notebook: {key: value}}``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..atomic import write_json
from ..errors import PeagleError
from ..jsonsafe import json_safe
from ..settings import results_dir

SUMMARY_FILE = "summary.json"


def summary_path() -> Path:
    return results_dir() / SUMMARY_FILE


# where a run outside the workbook runner and Jupyter's server (nbval, a bare kernel) records: no chapter owns it
UNKNOWN = "unknown"


def current_notebook() -> str:
    """The notebook being run: ``$PEAGLE_NOTEBOOK`` (set by the workbook runner), else the Jupyter session's
    notebook (``$JPY_SESSION_NAME``, set by jupyter_server), else :data:`UNKNOWN`."""
    name = os.environ.get("PEAGLE_NOTEBOOK") or os.environ.get("JPY_SESSION_NAME")
    return Path(name).stem if name else UNKNOWN


def load() -> dict[str, dict]:
    """Everything recorded so far: ``{notebook: {key: value}}`` (empty when nothing was recorded)."""
    path = summary_path()
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PeagleError(f"{path} is not valid JSON ({exc}). Fix: delete it; the next run rewrites it.") from exc


def _write(data: dict) -> None:
    write_json(summary_path(), data, indent=2, sort_keys=True)


def record(key: str, value, notebook: str | None = None):
    """Store ``value`` under ``key`` for ``notebook`` (default: the running notebook); returns ``value``."""
    notebook = notebook or current_notebook()
    data = load()
    data.setdefault(notebook, {})[str(key)] = json_safe(value)
    _write(data)
    return value


def clear(notebook: str) -> None:
    """Forget what ``notebook`` recorded (the runner calls this before running it again)."""
    data = load()
    if data.pop(notebook, None) is not None:
        _write(data)
