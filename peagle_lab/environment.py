"""The one environment record: what a timing or a training run depends on, written into every result.

:func:`environment` is built on ``torch.utils.collect_env.get_env_info()`` (OS, libc, compilers, CUDA and driver
versions: under ``"system"``), plus what that leaves out and a timing needs: the CPU model, its ISA flags
(avx2, avx512f, avx512_bf16, amx_bf16, ... from ``/proc/cpuinfo``), the usable cores, torch threads and OpenMP
settings, the load average, the git commit, and the host label the results folders are named by
(:func:`peagle_lab.precision.host_slug`). Its keys are the union of what the benchmark and the training records
have always carried, so committed results files stay readable.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import time
from datetime import datetime, timezone

import torch

from .hardware import cpu_name, load_average, usable_cores
from .precision import dtype_name, host_slug, isa_record
from .settings import REPO_ROOT

# The fields of collect_env's SystemEnv worth keeping (its pip/conda package lists and lscpu text are left out:
# the versions that matter are top-level keys, the CPU facts have keys of their own).
_SYSTEM_FIELDS = ("torch_version", "is_debug_build", "cuda_compiled_version", "hip_compiled_version", "gcc_version",
                  "clang_version", "os", "libc_version", "python_platform", "is_cuda_available",
                  "cuda_runtime_version", "nvidia_driver_version", "nvidia_gpu_models", "cudnn_version",
                  "is_xnnpack_available")


@functools.lru_cache(maxsize=1)
def system_info() -> dict:
    """What ``torch.utils.collect_env.get_env_info()`` finds (read once per process: it takes a few seconds)."""
    from torch.utils import collect_env

    try:
        info = collect_env.get_env_info()._asdict()
    except Exception as exc:  # noqa: BLE001 - a probe of the machine must never stop a run
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {k: info.get(k) for k in _SYSTEM_FIELDS}


def git(*args) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def environment(device=None, dtype=None, model=None) -> dict:
    """The environment record now (see the module docstring). ``model``: the target, whose device and dtype are
    recorded when ``device`` / ``dtype`` are not given.

    Keys: ``timestamp_utc``, ``start_epoch_s``, ``host``, ``device``, ``hardware``, ``cpu``, ``cpu_count`` and
    ``cpu_cores_usable``, ``gpu`` (the device's GPU) and ``cuda`` (GPU 0, where CUDA is there), ``isa_flags``,
    ``bf16_units``, ``torch_cpu_capability``, ``torch_threads``, ``omp_num_threads``, ``omp_wait_policy``, ``timer``,
    ``dtype`` and ``target_dtype``, ``torch``, ``transformers``, ``python``, ``platform``, ``git_commit``,
    ``git_dirty``, ``loadavg_start`` (1, 5, 15 min) and ``load_average_1m``, ``loadavg_end`` (None until the end
    state is added, e.g. by :func:`peagle_lab.bench.record.finish_environment`), ``system`` (collect_env).
    """
    import transformers

    if model is not None:
        param = next(model.parameters())
        device = param.device if device is None else device
        dtype = param.dtype if dtype is None else dtype
    device = torch.device(device or "cpu")
    cores, load = usable_cores(), load_average()
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    name = dtype_name(dtype) if dtype is not None else None
    commit = git("rev-parse", "HEAD")
    env = {
        "timestamp_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "start_epoch_s": round(time.time(), 3),
        "host": host_slug(device),
        "device": str(device),
        "hardware": gpu or f"{cpu_name()} ({cores} cores, {torch.get_num_threads()} torch threads)",
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "cpu_cores_usable": cores,
        "gpu": gpu,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        **isa_record(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "timer": "cuda-events" if device.type == "cuda" else "perf_counter",
        "dtype": name,
        "target_dtype": name if model is not None else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": commit or "none (no commit yet)",
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None,
        "loadavg_start": load,
        "load_average_1m": load[0] if load else None,
        "loadavg_end": None,
        "system": system_info(),
    }
    return env
