"""The options every command that loads the target shares (``--target``, ``--device``, ``--threads``,
``--dtype``) and the one function that applies them, on the ground floor so that every command module of
:mod:`peagle_lab.cli` (generate, extract, distill, train, bench, recipe, ...) and the rooms below share them."""

from __future__ import annotations

import sys

import torch

from . import models, validate
from .errors import PeagleError
from .precision import describe_choice, resolve_dtype


def add_target_options(p) -> None:
    """The options every command that loads the target shares: --target, --device, --threads."""
    p.add_argument("--target", default=None, help="HF id or local path (default: $PEAGLE_TARGET or the embedded model)")
    p.add_argument("--device", default=None,
                   help="cpu, cuda, cuda:1, ... (default: $PEAGLE_DEVICE, else cuda when available)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice; 1 is often faster on a busy CPU)")
    p.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"],
                   help="compute dtype (default: $PEAGLE_DTYPE, else auto: bf16 on CUDA sm_80+ and on CPUs with native "
                        "bf16 (AMX / AVX512-BF16), fp16 on older GPUs (T4, V100), fp32 elsewhere; float16: CUDA only)")


def check_target_options(args) -> tuple[torch.device, torch.dtype]:
    """--threads, --device (or $PEAGLE_DEVICE), --dtype (or $PEAGLE_DTYPE) and $PEAGLE_CI, before anything loads:
    ``(device, dtype)``."""
    from .settings import is_ci

    is_ci()
    validate.threads(getattr(args, "threads", None))
    device = models.pick_device(getattr(args, "device", None))
    return device, resolve_dtype(getattr(args, "dtype", None), device, warn=False)


class TargetPeek:
    """What the checks before the long part need of the target, without its weights: its config (vocabulary
    size, context length) and its tokenizer."""

    def __init__(self, target):
        from transformers import AutoConfig, AutoTokenizer

        path = models.resolve_target(target)
        try:
            self.config = AutoConfig.from_pretrained(path)
            self.tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as exc:
            raise PeagleError(f"Could not read the target '{path}' ({str(exc).splitlines()[0]}). Fix: pass a local "
                              "model directory or a Hugging Face id that is available here (--target).") from exc
        text = getattr(self.config, "text_config", None)
        cfg = self.config if getattr(self.config, "vocab_size", None) or text is None else text
        self.text_config = cfg  # the language model's config (vocabulary, hidden size, layers)
        self.vocab_size = int(cfg.vocab_size)
        self.context = getattr(cfg, "max_position_embeddings", None)
        self.num_layers = getattr(cfg, "num_hidden_layers", None)


def apply_target_options(args) -> tuple[torch.device, torch.dtype]:
    """Apply --threads and say the dtype chosen for --device (with its warning): ``(device, dtype)``."""
    device, dtype = check_target_options(args)
    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    dtype = resolve_dtype(getattr(args, "dtype", None), device)  # again, with its warning
    print(f"[peagle-lab] dtype: {describe_choice(dtype, device, getattr(args, 'dtype', None))}", file=sys.stderr)
    return device, dtype


def load_cli_target(args):
    """Apply --threads, then load --target on --device: ``(model, tokenizer, target name)``."""
    device, dtype = apply_target_options(args)
    # models.load_target, looked up when called (tests replace it)
    model, tokenizer = models.load_target(args.target, device=device, dtype=dtype)
    return model, tokenizer, args.target or models.target_name()
