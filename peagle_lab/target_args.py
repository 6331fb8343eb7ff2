"""The options every command that loads the target shares (``--target``, ``--device``, ``--threads``,
``--dtype``) and the one function that applies them. The commands' ``register_cli`` / ``_run_cli`` (generate,
extract, distill, train, bench, recipe, ...) import them from here, never from :mod:`peagle_lab.cli`, which imports
the commands."""

from __future__ import annotations

import sys

import torch

from . import models, validate
from .precision import describe_choice, resolve_dtype


def add_target_options(p) -> None:
    """The options every command that loads the target shares: --target, --device, --threads."""
    p.add_argument("--target", default=None, help="HF id or local path (default: $PEAGLE_TARGET or the embedded model)")
    p.add_argument("--device", default=None,
                   help="cpu, cuda, cuda:1, ... (default: $PEAGLE_DEVICE, else cuda when available)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice; 1 is often faster on a busy CPU)")
    p.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16"],
                   help="compute dtype (default: $PEAGLE_DTYPE, else auto: bf16 on CUDA and on CPUs with native bf16 "
                        "(AMX / AVX512-BF16), fp32 elsewhere)")


def load_cli_target(args):
    """Apply --threads, then load --target on --device: ``(model, tokenizer, target name)``."""
    if validate.threads(getattr(args, "threads", None)):
        torch.set_num_threads(args.threads)
    device = validate.device(args.device) if args.device else models.pick_device()
    dtype = resolve_dtype(getattr(args, "dtype", None), device)
    print(f"[peagle-lab] dtype: {describe_choice(dtype, device, getattr(args, 'dtype', None))}", file=sys.stderr)
    # models.load_target, looked up when called (tests replace it)
    model, tokenizer = models.load_target(args.target, device=device, dtype=dtype)
    return model, tokenizer, args.target or models.target_name()
