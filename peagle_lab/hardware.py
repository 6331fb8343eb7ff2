"""Name the hardware a timing ran on (every speed the workbook prints comes with this line)."""

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


def describe(device=None) -> str:
    """One line: device, CPU, torch threads, load average, torch version."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    parts = [f"CPU: {cpu_name()} ({os.cpu_count()} cores, torch threads {torch.get_num_threads()})"]
    if device.type == "cuda":
        parts.insert(0, f"GPU: {torch.cuda.get_device_name(device)}")
    if hasattr(os, "getloadavg"):
        parts.append("load avg %.1f" % os.getloadavg()[0])
    parts.append(f"torch {torch.__version__}")
    return " | ".join(parts)
