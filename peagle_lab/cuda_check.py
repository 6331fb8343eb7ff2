"""Can the installed torch use this machine's NVIDIA GPU? Asked by ``make setup`` right after the install, so a
set-up that would leave every notebook silently on the CPU stops with one line instead.

A torch wheel is built for one CUDA release and runs on drivers from that release's minimum on
(:data:`MIN_DRIVER`: CUDA 13 needs R580, CUDA 12 R525, with CUDA's minor-version compatibility). The check is a
pure function of the driver version (``nvidia-smi --query-gpu=driver_version``, empty without a GPU), the wheel's
``torch.version.cuda`` and ``torch.cuda.is_available()``: :func:`problem`. The fix it names is the CUDA 12 wheel
(``make setup CUDA=1 TORCH_CUDA=cu126``) or a newer driver.

    python -m peagle_lab.cuda_check "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
"""

from __future__ import annotations

import sys

# CUDA major release -> the oldest Linux driver that runs it (NVIDIA's CUDA compatibility table)
MIN_DRIVER = {11: (450, 80), 12: (525, 60), 13: (580, 65)}
CUDA12_WHEEL = "cu126"  # the CUDA 12 torch index (download.pytorch.org/whl/cu126): drivers from R525


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in str(text).strip().split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def needed_driver(torch_cuda: str) -> tuple[int, ...] | None:
    """The oldest driver a wheel built for CUDA ``torch_cuda`` (``"13.0"``, ``"12.6"``) runs on (None: unknown)."""
    v = _version(torch_cuda)
    return MIN_DRIVER.get(v[0]) if v else None


def problem(driver: str, torch_version: str, torch_cuda: str | None, cuda_available: bool) -> str | None:
    """One line saying why torch cannot use the GPU, and the fix (None: it can, or there is no GPU to use).
    ``driver``: the NVIDIA driver version, empty where ``nvidia-smi`` lists none."""
    if not driver.strip() or cuda_available:
        return None
    if torch_cuda is None:
        return (f"torch {torch_version} is a CPU build on a machine with an NVIDIA GPU (driver {driver}). "
                f"Fix: make setup CUDA=1 (add TORCH_CUDA={CUDA12_WHEEL} for a driver before 580).")
    need, have = needed_driver(torch_cuda), _version(driver)
    if need is not None and have < need:
        want = ".".join(map(str, need))
        return (f"torch {torch_version} is built for CUDA {torch_cuda}, which needs NVIDIA driver {want} or newer; "
                f"this machine's driver is {driver}. Fix: make setup CUDA=1 TORCH_CUDA={CUDA12_WHEEL} (torch for "
                f"CUDA 12, drivers from 525), or update the driver.")
    return (f"torch {torch_version} (CUDA {torch_cuda}) cannot use the GPU although driver {driver} is new enough "
            "for it (torch.cuda.is_available() is False). Fix: check that nvidia-smi works in this shell, that "
            "CUDA_VISIBLE_DEVICES does not hide the GPU, and that a container was started with the GPU (--gpus all).")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    import torch

    driver = argv[0] if argv else ""
    line = problem(driver, torch.__version__, torch.version.cuda, bool(torch.cuda.is_available()))
    if line:
        print(f"!! {line}", file=sys.stderr)
        return 1
    if driver.strip():
        print(f">> torch {torch.__version__} (CUDA {torch.version.cuda}) sees the GPU; driver {driver}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
