"""The lossless column: what the verdict weighs of an end-to-end run (:func:`run_divergence`), the short name of a
near-tie regime and one line per method saying how its outputs compare with plain greedy (the rule itself, and what
"lossless" means at a dtype on a device: :func:`peagle_lab.decoding.divergence.lossless_verdict`)."""

from __future__ import annotations

import torch

from ..decoding.divergence import NOT_LOSSLESS, lossless_verdict
from ..precision import dtype_name


def run_divergence(run: dict):
    """What :func:`lossless_verdict` weighs of one end-to-end run row: None when its output equals its reference's
    (plain greedy, or transformers' greedy for its own speculative methods), else its first divergence from plain
    greedy; a run that differs from its reference but not from plain greedy counts as a divergence at no near-tie
    (no near-tie of the plain run explains a difference from transformers' greedy)."""
    if run["identical_to_reference"]:
        return None
    return run["divergence"] or {"near_tie": False}


def regime_label(dtype, device="cpu") -> str:
    """The short name the lossless column gives a near-tie regime: ``bf16``, ``fp16``, ``fp32 on cuda``."""
    short = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}
    name = short.get(dtype, dtype_name(dtype))
    dev = torch.device(device).type
    return name if dev == "cpu" or name not in ("fp32", "fp64") else f"{name} on {dev}"


def lossless_note(regime: str, n_runs: int, divs: list[dict], label: str = "bf16") -> str:
    """The lossless column in words: which regime (``label``: :func:`regime_label`), how many outputs diverged,
    the largest margin among them."""
    broken = lossless_verdict(divs, regime) == NOT_LOSSLESS
    if regime == "exact":
        return f"exact: {len(divs)}/{n_runs} outputs DIFFER" if broken else "exact: identical to plain greedy"
    if not divs:
        return f"{label}: {n_runs}/{n_runs} identical to plain {label} greedy"
    ties = sum(d["near_tie"] for d in divs)
    worst = max(d["margin"] for d in divs)
    return (f"{label}: {len(divs)}/{n_runs} diverge, {ties} at near-ties; largest margin {worst:.3g}"
            + (" (NOT a near-tie)" if broken else ""))
