"""Name the hardware a timing ran on (every speed the workbook prints comes with this line): the CPU model, the
cores this process may use and the load average, as the OS tells them. The full record of a run's machine and
libraries is :func:`peagle_lab.environment.environment`."""

from __future__ import annotations

import os
import platform

import torch


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo`` on Linux, where ``platform.processor()`` is often empty)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where that is not known)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages, rounded to 0.01 (None where the OS does not tell)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def describe(device=None) -> str:
    """One line: device, CPU, torch threads, load average, torch version."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    parts = [f"CPU: {cpu_name()} ({usable_cores()} cores, torch threads {torch.get_num_threads()})"]
    if device.type == "cuda":
        parts.insert(0, f"GPU: {torch.cuda.get_device_name(device)}")
    load = load_average()
    if load:
        parts.append("load avg %.1f" % load[0])
    parts.append(f"torch {torch.__version__}")
    return " | ".join(parts)
