"""What every benchmark result carries: its schema tag, numbers rounded for the record (NaN and inf as None),
JSON-safe values, and the environment record (hardware, threads, dtype, library versions, git commit and the
load average at the start and the end): a timing without its machine means little."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import time
from datetime import datetime, timezone

import torch

from ..hardware import cpu_name
from ..precision import host_slug, isa_record
from ..settings import REPO_ROOT

SCHEMA = "peagle-lab-bench/1"


def rounded(x, nd=5):
    """``round(x, nd)`` as a float; None for None, NaN and inf."""
    if x is None:
        return None
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return round(float(x), nd)


def json_safe(obj):
    """JSON-safe: NaN/inf -> None, tuples -> lists, tensors -> lists."""
    if isinstance(obj, float):
        return None if (math.isnan(obj) or math.isinf(obj)) else obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "tolist"):
        return json_safe(obj.tolist())
    return obj


# ============================================================================================ environment
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
        "cpu": cpu_name(),
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
