"""The parameters cell every notebook starts with, in one place.

Parameters come from the environment: ``PEAGLE_TARGET`` (default: the embedded SmolLM2-135M-Instruct),
``PEAGLE_DEVICE`` (default: cuda if present, else cpu), ``PEAGLE_CI=1`` (small sizes, same code path).
"""

from __future__ import annotations

from ..settings import is_ci, prefer_passive_omp_wait, seed_everything


def start(seed: int = 0):
    """Prefer passive OpenMP waiting (before torch starts its threads), seed everything, print and return
    ``(target, device, ci)``."""
    prefer_passive_omp_wait()
    from .. import models  # imports torch: after the OpenMP policy is set

    target, device, ci = models.target_name(), models.pick_device(), is_ci()
    seed_everything(seed)
    print(f"target={target}  device={device}  ci={ci}")
    return target, device, ci


DEFAULT_NAME = "SmolLM2-135M-Instruct"


def committed_label(what: str, host: str | None = None) -> str:
    """One line that labels committed results as the embedded SmolLM2-135M-Instruct's (where they were measured),
    and, when the notebook runs on another target, says they are not that target's."""
    from ..models import is_default_target, target_name

    line = f"{what}: committed results of {DEFAULT_NAME}" + (f", measured on {host}" if host else "")
    if not is_default_target():
        line += f" (not of this run's target, {target_name()}; the live cells measure that one)"
    return line
