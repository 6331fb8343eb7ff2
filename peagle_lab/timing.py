"""Timers and the environment record that every benchmark result carries.

CUDA events (after a synchronize) on a GPU, ``time.perf_counter`` on a CPU; medians and the interquartile range
over repeats; hardware, threads, dtype, library versions, git commit and the load average at the start and the end.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import time
from datetime import datetime, timezone
from typing import Callable, Sequence

import torch

from .settings import REPO_ROOT


# ============================================================================================ timing
def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_once(fn: Callable[[], object], device="cpu") -> float:
    """Seconds one call of ``fn`` takes: CUDA events on a GPU (after a synchronize), perf_counter on a CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_repeated(fn: Callable[[], object], device="cpu", repeats: int = 10, warmup: int = 2) -> list[float]:
    """``warmup`` untimed calls, then ``repeats`` timed ones (seconds)."""
    for _ in range(warmup):
        fn()
    return [time_once(fn, device) for _ in range(repeats)]


def summarize(samples: Sequence[float]) -> dict:
    """Median, quartiles, IQR, mean, min, max and n of a list of timings (seconds or any unit)."""
    xs = sorted(float(x) for x in samples if x is not None and not math.isnan(float(x)))
    if not xs:
        return {"median": None, "q1": None, "q3": None, "iqr": None, "mean": None, "min": None, "max": None, "n": 0}
    if len(xs) == 1:
        q1 = q3 = xs[0]
    else:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return {"median": statistics.median(xs), "q1": q1, "q3": q3, "iqr": q3 - q1, "mean": statistics.fmean(xs),
            "min": xs[0], "max": xs[-1], "n": len(xs)}


# ============================================================================================ environment
def _cpu_model() -> str:
    from .hardware import cpu_name

    return cpu_name()


def _git(*args) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def environment(device="cpu", dtype=None) -> dict:
    """What a timing depends on. Call at the start of a run; :func:`finish_environment` adds the end state."""
    import transformers

    device = torch.device(device)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    env = {
        "timestamp_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "start_epoch_s": round(time.time(), 3),
        "device": str(device),
        "cpu": _cpu_model(),
        "cpu_cores_usable": cores,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "hardware": None,
        "timer": "cuda-events" if device.type == "cuda" else "perf_counter",
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "dtype": str(dtype).replace("torch.", "") if dtype is not None else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": _git("rev-parse", "HEAD") or "none (no commit yet)",
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")) if _git("rev-parse", "HEAD") else None,
        "loadavg_start": _loadavg(),
        "loadavg_end": None,
    }
    env["hardware"] = env["gpu"] or f"{env['cpu']} ({cores} cores, {env['torch_threads']} torch threads)"
    from .precision import host_slug, isa_record

    env["host"] = host_slug(device)
    env |= isa_record()
    return env


def finish_environment(env: dict) -> dict:
    """Add the load average at the end and a ``quiet`` verdict (1-min load below 1 at start and end)."""
    env["loadavg_end"] = _loadavg()
    if env.get("start_epoch_s"):
        env["wall_s"] = round(time.time() - env["start_epoch_s"], 1)
    starts, ends = env.get("loadavg_start"), env["loadavg_end"]
    env["quiet"] = bool(starts and ends and starts[0] < 1.0 and ends[0] < 1.0) if env["device"] == "cpu" else None
    return env
