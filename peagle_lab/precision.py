"""The compute dtype: ``auto`` / ``float32`` / ``bfloat16``, chosen from what the hardware does natively.

``auto`` picks bfloat16 on CUDA and on CPUs with native bf16 matrix instructions (Intel AMX, or AVX512-BF16 as
on AMD Zen 4 and Intel Cooper Lake / Sapphire Rapids), float32 elsewhere: on a CPU without them bf16 is
emulated and slower than fp32. The choice is printed by the CLI and recorded in every result
(:func:`describe_choice`). Also here: a short slug naming the host (``cpu-epyc-avx512bf16-2c``), so results of
different machines live side by side and never overwrite each other.
"""

from __future__ import annotations

import os
import re
import warnings

import torch

from .errors import PeagleError
from .hardware import cpu_name, usable_cores

CHOICES = ("auto", "float32", "bfloat16")
_ALIASES = {"auto": "auto", "float32": "float32", "fp32": "float32", "float": "float32",
            "bfloat16": "bfloat16", "bf16": "bfloat16"}
_TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def cpu_flags() -> set[str]:
    """The CPU feature flags of ``/proc/cpuinfo`` (empty where it does not exist)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_bf16_units(flags: set[str] | None = None) -> str | None:
    """``"amx"``, ``"avx512_bf16"`` or ``None``: the CPU's native bf16 matrix instructions, if any."""
    flags = cpu_flags() if flags is None else flags
    amx = "amx_bf16" in flags
    try:
        amx = amx or bool(torch.cpu._is_amx_tile_supported())
    except (AttributeError, RuntimeError):
        pass
    if amx:
        return "amx"
    if "avx512_bf16" in flags:
        return "avx512_bf16"
    return None


def choice_name(dtype) -> str:
    if isinstance(dtype, torch.dtype):
        text = str(dtype).replace("torch.", "")
    else:
        text = str(dtype).strip().lower().replace("torch.", "")
    if text in ("float16", "fp16", "half"):
        raise PeagleError("float16 is not supported here (CPU kernels are slow and overflow-prone; the drafter "
                          "and the checks assume float32 or bfloat16). Fix: --dtype bfloat16 or --dtype float32.")
    if text not in _ALIASES:
        raise PeagleError(f"Unknown dtype {dtype!r}. Fix: --dtype (or PEAGLE_DTYPE) one of {', '.join(CHOICES)}.")
    return _ALIASES[text]


def resolve_dtype(dtype=None, device="cpu", warn: bool = True) -> torch.dtype:
    """The torch dtype for ``dtype`` (``None``: ``$PEAGLE_DTYPE``, else ``auto``) on ``device``.

    ``bfloat16`` on a CPU without native bf16 runs, with a warning that it will be slow.
    """
    name = choice_name(dtype if dtype is not None else os.environ.get("PEAGLE_DTYPE", "auto"))
    dev = torch.device(device)
    if name == "auto":
        if dev.type == "cuda":
            return torch.bfloat16
        return torch.bfloat16 if dev.type == "cpu" and cpu_bf16_units() else torch.float32
    if name == "bfloat16" and dev.type == "cpu" and not cpu_bf16_units() and warn:
        warnings.warn("bfloat16 on a CPU without native bf16 (no AMX, no AVX512-BF16): it is emulated and will be "
                      "slower than float32. Fix: --dtype float32 (or auto).", stacklevel=2)
    return _TORCH[name]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def describe_choice(dtype: torch.dtype, device="cpu", requested=None) -> str:
    """One line saying which dtype runs and why, e.g. ``bfloat16 (auto: CPU has avx512_bf16)``."""
    req = choice_name(requested if requested is not None else os.environ.get("PEAGLE_DTYPE", "auto"))
    dev = torch.device(device)
    if req != "auto":
        return f"{dtype_name(dtype)} (asked for)"
    if dev.type == "cuda":
        return f"{dtype_name(dtype)} (auto: CUDA)"
    units = cpu_bf16_units()
    return f"{dtype_name(dtype)} (auto: CPU has {units})" if units else f"{dtype_name(dtype)} (auto: no native bf16 on this CPU)"


def host_slug(device="cpu") -> str:
    """A short, stable name of this host for results folders: ``cpu-<vendor/model>-<isa>-<cores>c`` or
    ``cuda-<gpu>``. Examples: ``cpu-epyc-avx512bf16-2c``, ``cpu-xeon-amx-2c``, ``cpu-epyc-avx2-2c``, ``cuda-h200``."""
    dev = torch.device(device)
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev).lower()
        m = re.search(r"([a-z]\d{2,4}[a-z]*)", name.replace("nvidia", ""))
        return f"cuda-{m.group(1) if m else re.sub(r'[^a-z0-9]+', '-', name).strip('-')}"

    model = cpu_name().lower()
    family = next((w for w in ("epyc", "ryzen", "xeon", "core", "graviton", "neoverse") if w in model), None)
    family = family or re.sub(r"[^a-z0-9]+", "-", model).strip("-")[:16] or "cpu"
    flags = cpu_flags()
    units = cpu_bf16_units(flags)
    isa = {"amx": "amx", "avx512_bf16": "avx512bf16"}.get(units or "", "avx512" if "avx512f" in flags else
                                                           "avx2" if "avx2" in flags else "base")
    return f"cpu-{family}-{isa}-{usable_cores()}c"


def isa_record() -> dict:
    """The ISA facts a CPU timing depends on (for environment records)."""
    flags = cpu_flags()
    keep = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8")
    return {"isa_flags": sorted(f for f in keep if f in flags), "bf16_units": cpu_bf16_units(flags),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}
