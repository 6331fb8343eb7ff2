"""Argument checks at the CLI and API boundary, before any model loads. Each raises ``PeagleError`` with the
allowed range and the flag that fixes it."""

from __future__ import annotations

import math

import torch

from .errors import PeagleError

MAX_K = 64  # the drafter's hard limit (drafter.check_k)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def positive_int(value, name: str, flag: str | None = None, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer in ``[minimum, maximum]``."""
    flag = flag or f"--{name.replace('_', '-')}"
    if not _is_int(value) or value < minimum or (maximum is not None and value > maximum):
        rng = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise PeagleError(f"{name} must be an integer {rng}, got {value!r}. Fix: pass {flag} in {rng}.")
    return value


def num_speculative_tokens(k, limit: int = MAX_K) -> int:
    """The user's K: 1..limit (a round near the end of a generation may draft fewer; that is not an error)."""
    return positive_int(k, "K (num_speculative_tokens)", "-k/--num-speculative-tokens", 1, limit)


def max_new_tokens(n) -> int:
    return positive_int(n, "max_new_tokens", "--max-new-tokens", 1)


def temperature(t) -> float:
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t < 0:
        raise PeagleError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}. "
                          "Fix: pass --temperature 0 for greedy decoding or a positive value to sample.")
    return float(t)


def top_p(p) -> float:
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not (0 < p <= 1):
        raise PeagleError(f"top_p must lie in (0, 1], got {p!r}. Fix: pass --top-p 1.0 (no nucleus filtering) "
                          "or a value such as 0.9.")
    return float(p)


def threads(n) -> int | None:
    if n is None:
        return None
    return positive_int(n, "threads", "--threads", 1)


def device(name) -> torch.device:
    """A torch device that exists on this machine."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise PeagleError(f"Unknown device {name!r}. Fix: --device cpu, cuda or cuda:N.") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise PeagleError(f"--device {name}: this machine has no CUDA GPU (torch {torch.__version__}). "
                              "Fix: --device cpu, or install a CUDA build of torch on a GPU machine.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise PeagleError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here. "
                              f"Fix: --device cuda:0..cuda:{torch.cuda.device_count() - 1}.")
    elif dev.type not in ("cpu", "mps", "xpu"):
        raise PeagleError(f"Device type {dev.type!r} is not supported. Fix: --device cpu or cuda.")
    return dev


def prompt_length(n_prompt: int, n_new: int, context: int | None) -> None:
    """A prompt (plus the tokens to generate) must fit the target's context window."""
    if context and n_prompt >= context:
        raise PeagleError(f"The prompt has {n_prompt} tokens; the target's context holds {context}. Fix: shorten "
                          "the prompt.")
    if context and n_prompt + n_new > context:
        raise PeagleError(f"The prompt ({n_prompt} tokens) plus --max-new-tokens {n_new} exceeds the target's "
                          f"context of {context} positions. Fix: --max-new-tokens {context - n_prompt} or less.")
