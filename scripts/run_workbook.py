#!/usr/bin/env python3
"""Run the whole workbook headless: every notebooks/*.ipynb in order, in a kernel of THIS Python environment.

Writes, under --out (default build/workbook):
  NAME.ipynb    the executed notebook (outputs included, also when a cell failed)
  NAME.html     its HTML export
  SUMMARY.md    per notebook: status, run time, figures produced, and the key numbers it recorded through
                ``peagle_lab.workbook.report.record`` (read from $PEAGLE_RESULTS/summary.json)
A failing notebook is reported and the rest still run; the exit code is 1 if any failed.

    python scripts/run_workbook.py                  # all notebooks, full sizes
    python scripts/run_workbook.py --ci 02 03       # PEAGLE_CI=1 sizes, only notebooks whose name starts 02 / 03
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout even without `pip install -e .`
from peagle_lab.atomic import write_text  # noqa: E402
from peagle_lab.hardware import cpu_name  # noqa: E402


def figures(nb) -> int:
    """Number of image outputs (matplotlib figures and other pictures) in an executed notebook."""
    return sum(
        1
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if any(mime.startswith("image/") for mime in out.get("data", {}))
    )


def select(notebooks: list[Path], wanted: list[str]) -> list[Path]:
    if not wanted:
        return notebooks
    chosen = [nb for nb in notebooks if any(nb.stem.startswith(w) or nb.name == Path(w).name for w in wanted)]
    if not chosen:
        sys.exit(f"No notebook matches {wanted}; have: {[nb.stem for nb in notebooks]}")
    return chosen


def run_one(path: Path, out_dir: Path, timeout: int, kernel: str, html: bool) -> dict:
    """One notebook through ``peagle_lab.workbook.execute`` (kernel mode): the executed copy and its stderr log in
    ``out_dir``, its HTML export beside them; a notebook that fails is a row saying so, not the end of the run."""
    import nbformat

    from peagle_lab.errors import PeagleError
    from peagle_lab.workbook.execute import NotebookFailed, execute

    status, error, start = "ok", "", time.perf_counter()
    try:
        done = execute(path, out_dir, mode="kernel", timeout=timeout, kernel=kernel)
        seconds, copy, moved = done.seconds, done.copy, done.stderr_moved
    except NotebookFailed as exc:
        where = f"code cell {exc.cell}: " if exc.cell else ""
        status, error, seconds, copy, moved = "FAILED", (where + exc.error)[:300], exc.seconds, exc.copy, None
    except PeagleError as exc:  # no such notebook, or its copy could not be written: a row, then the next one
        status, error, seconds, copy, moved = "FAILED", str(exc)[:300], time.perf_counter() - start, None, None
    if moved:
        print(f"    {moved} stderr output(s) (warnings, logs) moved to {path.stem}.stderr.txt")
    nb = nbformat.read(copy, as_version=4) if copy is not None else nbformat.v4.new_notebook()
    if html and copy is not None:
        from nbconvert import HTMLExporter

        body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
        write_text(out_dir / f"{path.stem}.html", body)
    return {"name": path.stem, "status": status, "seconds": seconds, "figures": figures(nb), "error": error}


def host_line() -> str:
    import torch

    from peagle_lab.precision import host_slug

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU only ({cpu_name()})"
    return (f"{host_slug()} ({platform.platform()}), load average at the end {os.getloadavg()[0]:.2f}, "
            f"Python {platform.python_version()}, torch {torch.__version__}, {device}, "
            f"{os.cpu_count()} CPU cores, {torch.get_num_threads()} torch threads")


def write_summary(rows: list[dict], out_dir: Path, recorded: dict) -> Path:
    env = {k: os.environ.get(k, "") for k in ("PEAGLE_TARGET", "PEAGLE_DEVICE", "PEAGLE_CI")}
    lines = [
        "# Workbook run",
        "",
        f"- Date: {dt.datetime.now().isoformat(timespec='seconds')}",
        f"- Host: {host_line()}",
        "- Settings: " + ", ".join(f"{k}={v or '(unset)'}" for k, v in env.items()),
        "",
        "| notebook | status | time (s) | figures |",
        "| --- | --- | ---: | ---: |",
    ]
    lines += [f"| {r['name']} | {r['status']} | {r['seconds']:.1f} | {r['figures']} |" for r in rows]
    lines.append(f"| **all** | {'ok' if all(r['status'] == 'ok' for r in rows) else 'FAILED'} | "
                 f"{sum(r['seconds'] for r in rows):.1f} | {sum(r['figures'] for r in rows)} |")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "## Failures", ""] + [f"- {r['name']}: {r['error']}" for r in failed]
    lines += ["", "## Key numbers", ""]
    any_numbers = False
    for r in rows:
        numbers = recorded.get(r["name"], {})
        if numbers:
            any_numbers = True
            lines += [f"### {r['name']}", ""] + [f"- `{k}`: {v}" for k, v in numbers.items()] + [""]
    if not any_numbers:
        lines.append("(none recorded)")
    path = out_dir / "SUMMARY.md"
    write_text(path, "\n".join(lines).rstrip() + "\n")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Run every notebook headless and summarise the run.")
    parser.add_argument("only", nargs="*", help="run only notebooks whose name starts with one of these")
    parser.add_argument("--notebooks", type=Path, default=REPO / "notebooks")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "workbook")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per cell (default 3600)")
    parser.add_argument("--kernel", default="python3", help="kernel name (python3 = this Python environment)")
    parser.add_argument("--ci", action="store_true", help="set PEAGLE_CI=1 (small sizes, same code path)")
    parser.add_argument("--no-html", dest="html", action="store_false", help="skip the HTML export")
    args = parser.parse_args(argv)

    from peagle_lab.settings import prefer_passive_omp_wait

    prefer_passive_omp_wait()  # inherited by every kernel this run starts, before they import torch
    if args.ci:
        os.environ["PEAGLE_CI"] = "1"
    # One results directory for the kernels (cwd = notebooks/) and this script (execute's switches do the same)
    os.environ["PEAGLE_RESULTS"] = str(Path(os.environ.get("PEAGLE_RESULTS", REPO / "results")).resolve())
    notebooks = select(sorted(args.notebooks.glob("*.ipynb")), args.only)
    if not notebooks:
        print(f"No notebooks in {args.notebooks}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    from peagle_lab.workbook import report

    # every notebook of this run forgets its earlier records first: a chapter that reads what later ones record
    # (05's ledger) then sees only this run's rows, never a previous run's; so do records no chapter owns (a run
    # under nbval or a bare kernel, at whatever size it ran)
    for name in [path.stem for path in notebooks] + [report.UNKNOWN]:
        report.clear(name)

    rows = []
    for i, path in enumerate(notebooks, 1):
        print(f"[{i}/{len(notebooks)}] {path.name} ...", flush=True)
        row = run_one(path, args.out, args.timeout, args.kernel, args.html)
        rows.append(row)
        print(f"    {row['status']} in {row['seconds']:.1f} s, {row['figures']} figures"
              + (f": {row['error']}" if row["error"] else ""), flush=True)

    summary = write_summary(rows, args.out, report.load())
    failed = [r["name"] for r in rows if r["status"] != "ok"]
    print(f"\nWrote {summary} and the executed notebooks beside it.")
    if failed:
        print(f"FAILED notebooks: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"All {len(rows)} notebooks ran.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
