"""The target commands: ``peagle-lab make-tiny-target`` (:mod:`peagle_lab.tiny_target`) and ``memory-plan``
(:mod:`peagle_lab.workbook.memory_plan`)."""

from __future__ import annotations

import json
import time

import torch

from .. import validate
from ..errors import PeagleError
from ..memory import GIB
from ..models import resolve_target, target_name
from ..tiny_target import ARCHS, MARKER, make_tiny_target, spec_for
from ..workbook.memory_plan import plan_lines


def register_cli(sub):
    """make-tiny-target and memory-plan, in the order ``--help`` lists them."""
    _register_tiny_target(sub)
    _register_memory_plan(sub)


def _register_tiny_target(sub):
    p = sub.add_parser("make-tiny-target",
                       help="build a tiny random target (Qwen3, GPT-OSS or Qwen3-MoE; own BPE vocabulary and chat "
                            "template) for CI")
    p.add_argument("--arch", choices=ARCHS, default="qwen3",
                   help="architecture: qwen3 (default), gpt-oss (sliding + full attention, sinks, MoE), qwen3-moe")
    p.add_argument("--out", required=True, help="output directory (a Hugging Face model folder)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace a tiny target built with other settings")
    p.set_defaults(func=_run_tiny_target)


def _run_tiny_target(args):
    t0 = time.perf_counter()
    out = make_tiny_target(args.out, spec_for(args.arch, args.seed), overwrite=args.overwrite)
    rec = json.loads((out / MARKER).read_text())
    s = rec["spec"]
    print(f"{out}: {rec['architecture']}, {s['num_hidden_layers']} layers, hidden {s['hidden_size']}, "
          f"{s['num_attention_heads']} heads ({s['num_key_value_heads']} KV), vocab {rec['vocab_size']}, "
          f"mask token {rec['mask_token']} = {rec['mask_token_id']}; {time.perf_counter() - t0:.1f} s")
    return 0


def _register_memory_plan(sub) -> None:
    p = sub.add_parser("memory-plan", help="what each notebook holds on the GPU at its peak, for a target and dtype "
                                           "(read from its config alone: no weights, no GPU)")
    p.add_argument("--target", default=None, help="HF id or local path (default: $PEAGLE_TARGET or the embedded model)")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"],
                   help="the dtype the target loads in (default bfloat16: what auto picks on CUDA sm_80+)")
    p.add_argument("--gpu-gib", type=float, default=24.0, help="the GPU's memory in GiB (default 24: A10G, L4)")
    p.set_defaults(func=_run_memory_plan)


def _run_memory_plan(args) -> int:
    from transformers import AutoConfig

    validate.finite(args.gpu_gib, "gpu_gib", "--gpu-gib", low=0, low_open=True)
    try:
        config = AutoConfig.from_pretrained(resolve_target(args.target))
    except (OSError, ValueError) as exc:
        raise PeagleError(f"no config for target {args.target or target_name()}: {exc}. Fix: a local model "
                          "directory or a hub id reachable from here (only its config.json is read).") from None
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    print(f"target {args.target or target_name()} in {args.dtype} on a {args.gpu_gib:g} GiB GPU (estimates; CUDA's "
          "context, ~0.5 GiB, comes on top):")
    for line in plan_lines(config, dtype, int(args.gpu_gib * GIB)):
        print(line)
    return 0
