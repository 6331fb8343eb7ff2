"""The accelerator (one process or several: ``accelerate launch`` / ``torchrun``), and a global batch the processes
can share."""

from __future__ import annotations

import torch

from ..errors import PeagleError
from .config import TrainConfig


def check_world_size(cfg: TrainConfig, world: int) -> None:
    """Refuse a global batch that the processes cannot share evenly."""
    if world <= 1:
        return
    rows = cfg.batch_tokens // cfg.row_tokens
    if cfg.batch_tokens % cfg.row_tokens or rows % world:
        raise PeagleError(f"--batch-tokens {cfg.batch_tokens} is {cfg.batch_tokens / cfg.row_tokens:g} rows of "
                          f"--row-tokens {cfg.row_tokens}, which {world} processes cannot share evenly. Fix: a "
                          f"--batch-tokens that is a multiple of {world} x {cfg.row_tokens} = "
                          f"{world * cfg.row_tokens} (e.g. {max(rows // world, 1) * world * cfg.row_tokens}), or "
                          "another number of processes.")


def make_accelerator(device):
    """accelerate's ``Accelerator``: the trainer's one code path on every device, one process or several (it places
    the model, wraps it in DDP when several processes run, and reduces across them)."""
    try:
        from accelerate import Accelerator
    except ImportError as exc:  # a dependency of the package: only a broken environment lacks it
        raise PeagleError("Training needs `accelerate` (a dependency of peagle-lab). "
                          "Fix: pip install accelerate") from exc
    # on the CPU (gloo) accelerate needs cpu=True to join the processes torchrun started; bf16 autocast is
    # applied by the trainer itself
    return Accelerator(mixed_precision="no", cpu=torch.device(device).type == "cpu")
