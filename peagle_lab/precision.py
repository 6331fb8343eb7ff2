"""The compute dtype: ``auto`` / ``float32`` / ``bfloat16`` / ``float16`` (CUDA only), chosen from what the
hardware does natively.

``auto`` (:func:`auto_dtype`, a pure function of device type, CUDA compute capability and the CPU's bf16 units):
bfloat16 on CUDA GPUs of compute capability 8.0 or newer (A100, A10G, L4, H100, H200, ...), float16 on older GPUs
(T4 is sm_75, V100 sm_70: bf16 is emulated there), bfloat16 on CPUs with native bf16 matrix instructions (Intel
AMX, or AVX512-BF16 as on AMD Zen 4 and Intel Cooper Lake / Sapphire Rapids), float32 on other CPUs, where bf16
is emulated and slower than fp32. Training autocast never picks float16 (it would need loss scaling): float32
there. The choice is printed by the CLI and recorded in every result (:func:`describe_choice`). Also here: a short
slug naming the host (``cpu-epyc-avx512bf16-2c``, ``gpu-h200``), so results of different machines live side by
side and never overwrite each other.
"""

from __future__ import annotations

import os
import re
import warnings

import torch

from .errors import PeagleError
from .hardware import cpu_name, usable_cores

CHOICES = ("auto", "float32", "bfloat16", "float16")
_ALIASES = {"auto": "auto", "float32": "float32", "fp32": "float32", "float": "float32",
            "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16"}
_TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# The first CUDA compute capability with native bf16 tensor cores (Ampere, sm_80).
BF16_MIN_CAPABILITY = (8, 0)


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


def auto_dtype(device_type: str, capability: tuple[int, int] | None = None, cpu_units: str | None = None,
               training: bool = False) -> torch.dtype:
    """What ``auto`` means on a device: a pure function of the device type (``cuda`` / ``cpu`` / other), the
    CUDA compute capability ``(major, minor)`` and the CPU's native bf16 units (:func:`cpu_bf16_units`).

    CUDA sm_80+: bfloat16; older CUDA (sm_70 V100, sm_75 T4): float16, or float32 for ``training`` (fp16 autocast
    would need loss scaling); a CPU with AMX / AVX512-BF16: bfloat16; anything else: float32."""
    if device_type == "cuda":
        if capability is not None and tuple(capability) >= BF16_MIN_CAPABILITY:
            return torch.bfloat16
        return torch.float32 if training else torch.float16
    if device_type == "cpu" and cpu_units:
        return torch.bfloat16
    return torch.float32


def cuda_capability(device) -> tuple[int, int] | None:
    """The compute capability of a CUDA ``device`` (None for other devices or where CUDA is not there)."""
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability(dev))


def choice_name(dtype) -> str:
    text = dtype_name(dtype if isinstance(dtype, torch.dtype) else str(dtype).strip().lower())
    if text not in _ALIASES:
        raise PeagleError(f"Unknown dtype {dtype!r}. Fix: --dtype (or PEAGLE_DTYPE) one of {', '.join(CHOICES)}.")
    return _ALIASES[text]


def resolve_dtype(dtype=None, device="cpu", warn: bool = True, training: bool = False) -> torch.dtype:
    """The torch dtype for ``dtype`` (``None``: ``$PEAGLE_DTYPE``, else ``auto``) on ``device``.

    ``auto``: :func:`auto_dtype` of this device. ``bfloat16`` on a CPU without native bf16 runs, with a warning
    that it will be slow. ``float16`` only on CUDA (CPU kernels are slow and overflow-prone), never for training.
    """
    name = choice_name(dtype if dtype is not None else os.environ.get("PEAGLE_DTYPE", "auto"))
    dev = torch.device(device)
    if name == "auto":
        units = cpu_bf16_units() if dev.type == "cpu" else None
        return auto_dtype(dev.type, cuda_capability(dev), units, training=training)
    if name == "float16" and (dev.type != "cuda" or training):
        raise PeagleError(f"float16 is supported for inference on CUDA only, not {'training' if training else dev}"
                          " (CPU kernels are slow and overflow-prone; training would need loss scaling). "
                          "Fix: --dtype bfloat16 or --dtype float32 (or auto).")
    if name == "bfloat16" and dev.type == "cpu" and not cpu_bf16_units() and warn:
        warnings.warn("bfloat16 on a CPU without native bf16 (no AMX, no AVX512-BF16): it is emulated and will be "
                      "slower than float32. Fix: --dtype float32 (or auto).", stacklevel=2)
    return _TORCH[name]


def course_dtype(device=None) -> torch.dtype:
    """The dtype the workbook's notebooks load their target in: ``$PEAGLE_DTYPE`` when it is set; else float32 on
    a CPU, where speculative decoding reproduces plain greedy decoding token for token (a property of fp32 CPU
    kernels, which the chapters teach there), and :func:`auto_dtype` on CUDA (bf16 on sm_80+, fp16 before), where
    float32 would double the memory (32 GB for an 8B target) and buy no exactness (the GPU's kernels round
    differently in every shape; see ``decoding.divergence``). ``None``: CUDA when present, else the CPU."""
    if os.environ.get("PEAGLE_DTYPE"):
        return resolve_dtype(None, device or "cpu")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return torch.float32 if dev.type == "cpu" else resolve_dtype("auto", dev)


def dtype_name(dtype) -> str:
    """The one dtype name of the project: ``torch.bfloat16`` (or the text ``"torch.bfloat16"``) -> ``"bfloat16"``,
    as results, records and config.json (``torch_dtype``) write it."""
    return str(dtype).removeprefix("torch.")


def describe_choice(dtype: torch.dtype, device="cpu", requested=None) -> str:
    """One line saying which dtype runs and why, e.g. ``bfloat16 (auto: CPU has avx512_bf16)``."""
    req = choice_name(requested if requested is not None else os.environ.get("PEAGLE_DTYPE", "auto"))
    dev = torch.device(device)
    if req != "auto":
        return f"{dtype_name(dtype)} (asked for)"
    if dev.type == "cuda":
        cap = cuda_capability(dev)
        sm = f"sm_{cap[0]}{cap[1]}" if cap else "unknown capability"
        why = "native bf16" if dtype == torch.bfloat16 else "no native bf16 before sm_80"
        return f"{dtype_name(dtype)} (auto: CUDA {sm}, {why})"
    units = cpu_bf16_units()
    return f"{dtype_name(dtype)} (auto: CPU has {units})" if units else f"{dtype_name(dtype)} (auto: no native bf16 on this CPU)"


def gpu_slug(name: str, count: int = 1) -> str:
    """``gpu-<model>[-<memory>][-<n>x]`` from a CUDA device name: ``NVIDIA H200`` -> ``gpu-h200``, ``Tesla T4`` ->
    ``gpu-t4``, ``NVIDIA A100-SXM4-80GB`` -> ``gpu-a100-80gb``, ``NVIDIA GeForce RTX 4090`` -> ``gpu-rtx4090``;
    ``count`` GPUs of that name add ``-<count>x``."""
    text = name.lower().replace("nvidia", " ").replace("geforce", " ").replace("tesla", " ")
    m = re.search(r"\b(rtx\s?[a-z]?\d{3,4}|[a-z]{1,2}\d{1,4}[a-z]?)\b", text)
    model = m.group(1).replace(" ", "") if m else (re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:16] or "cuda")
    mem = re.search(r"(\d{2,3})\s?gb", text)
    slug = f"gpu-{model}" + (f"-{mem.group(1)}gb" if mem else "")
    return slug + (f"-{count}x" if count > 1 else "")


def host_slug(device=None) -> str:
    """A short, stable name of this host for results folders, from the device the run actually uses
    (``None``: CUDA when it is there, else the CPU): ``gpu-<model>`` (:func:`gpu_slug`) or
    ``cpu-<vendor/model>-<isa>-<cores>c``. Examples: ``gpu-h200``, ``gpu-t4``, ``cpu-epyc-avx512bf16-2c``,
    ``cpu-xeon-amx-2c``, ``cpu-epyc-avx2-2c``."""
    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        return gpu_slug(torch.cuda.get_device_name(dev))

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
