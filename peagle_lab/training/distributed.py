"""Several processes (``accelerate launch`` / ``torchrun``): the accelerator, and a global batch they can share."""

from __future__ import annotations

import os

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


def make_accelerator(cfg: TrainConfig, device):
    if cfg.accelerate == "no":
        return None
    multi = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if cfg.accelerate == "auto" and not (torch.cuda.is_available() or multi):
        return None
    try:
        from accelerate import Accelerator
    except ImportError:
        if multi:
            raise PeagleError("Several processes were launched but `accelerate` is not installed. "
                              "Fix: pip install accelerate")
        return None
    # on the CPU (gloo) accelerate needs cpu=True to join the processes torchrun started; bf16 autocast is
    # applied by the trainer itself
    return Accelerator(mixed_precision="no", cpu=torch.device(device).type == "cpu")
