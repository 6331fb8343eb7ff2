"""What "lossless" means at a dtype on a device: fp32 outputs on a CPU equal plain greedy token for token; bf16 /
fp16 outputs, and fp32 outputs on a GPU, may diverge only where the plain run's top-2 logits are a near-tie
(``divergence.tie_bound`` states the bound of each). And the lossless column in words."""

from __future__ import annotations

import torch

from ..precision import dtype_name


def lossless_regime(dtype, device="cpu") -> str:
    """``exact`` (fp32 on a CPU: token for token) or ``near-tie`` (bf16 / fp16, and fp32 on a GPU: divergences only
    where the plain run's top-2 logits are within the bound of ``divergence.tie_bound``)."""
    exact = dtype in (torch.float32, torch.float64) and torch.device(device).type == "cpu"
    return "exact" if exact else "near-tie"


def regime_label(dtype, device="cpu") -> str:
    """The short name the lossless column gives a near-tie regime: ``bf16``, ``fp16``, ``fp32 on cuda``."""
    short = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}
    name = short.get(dtype, dtype_name(dtype))
    dev = torch.device(device).type
    return name if dev == "cpu" or name not in ("fp32", "fp64") else f"{name} on {dev}"


def lossless_note(regime: str, n_runs: int, divs: list[dict], label: str = "bf16") -> str:
    """The lossless column in words: which regime (``label``: :func:`regime_label`), how many outputs diverged,
    the largest margin among them."""
    if regime == "exact":
        bad = len(divs)
        return "exact: identical to plain greedy" if not bad else f"exact: {bad}/{n_runs} outputs DIFFER"
    if not divs:
        return f"{label}: {n_runs}/{n_runs} identical to plain {label} greedy"
    ties = sum(d["near_tie"] for d in divs)
    worst = max(d["margin"] for d in divs)
    return (f"{label}: {len(divs)}/{n_runs} diverge, {ties} at near-ties; largest margin {worst:.3g}"
            + ("" if ties == len(divs) else " (NOT a near-tie)"))
