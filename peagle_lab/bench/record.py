"""What every benchmark result carries: its schema tag, numbers rounded for the record (NaN and inf as None), and
the environment record (:func:`peagle_lab.environment.environment`: hardware, threads, dtype, library versions,
git commit, the load average at the start) completed at the end by :func:`finish_environment`, read in one
line by :func:`load_line`: a timing without its machine means little. JSON-safe values:
:func:`peagle_lab.jsonsafe.json_safe`."""

from __future__ import annotations

import math
import time

from ..hardware import load_average

SCHEMA = "peagle-lab-bench/1"


def rounded(x, nd=5):
    """``round(x, nd)`` as a float; None for None, NaN and inf."""
    if x is None:
        return None
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return round(float(x), nd)


def finish_environment(env: dict) -> dict:
    """Add the load average at the end and a ``quiet`` verdict (1-min load below 1 at start and end)."""
    env["loadavg_end"] = load_average()
    if env.get("start_epoch_s"):
        env["wall_s"] = round(time.time() - env["start_epoch_s"], 1)
    starts, ends = env.get("loadavg_start"), env["loadavg_end"]
    env["quiet"] = bool(starts and ends and starts[0] < 1.0 and ends[0] < 1.0) if env["device"] == "cpu" else None
    return env


def load_line(env: dict) -> str:
    """The 1-minute load average at a run's start and end against its usable cores, with a warning when the load
    exceeds them (the timings were then shared with other work)."""
    start, end, cores = env.get("loadavg_start"), env.get("loadavg_end"), env.get("cpu_cores_usable")
    loads = [x[0] for x in (start, end) if x]
    warn = " - WARNING: load above the cores, the timings are shared with other work" if (
        loads and cores and max(loads) > cores) else ""
    return f"load (1 min) {start[0] if start else '?'} -> {end[0] if end else '?'} on {cores or '?'} cores{warn}"
