"""``peagle-lab bench-tensor-parallel``: the target's passes whole and sharded over processes against the
replicated drafter's (:mod:`peagle_lab.bench.tensor_parallel`), written to ``data/results/<host>/tensor-parallel/``."""

from __future__ import annotations

import time

import torch

from .. import lock, validate
from ..atomic import write_json
from ..environment import environment
from ..errors import PeagleError
from ..flags import add_config_flags, given_config_flags
from ..models import resolve_target
from ..bench.readme import format_table
from ..bench.record import load_line
from ..bench.tensor_parallel import TensorParallelConfig, check_results_file, results_path, run_tensor_parallel


def register_cli(sub):
    p = sub.add_parser("bench-tensor-parallel",
                       help="time the target's decode and verify passes whole and tensor-parallel (CPU processes) "
                            "against the drafter's passes (JSON)",
                       description="The target sharded Megatron-style over --tp processes (gloo, one thread per "
                                   "rank) against TP=1: decode step, verification of K+1 tokens, and the replicated "
                                   "P-EAGLE drafter's parallel (one pass) and sequential (K passes) drafting, with "
                                   "the drafter's share of a round.")
    add_config_flags(p, TensorParallelConfig)
    p.add_argument("--target", default=None, help="HF id or local path (default: $PEAGLE_TARGET or the embedded "
                                                  "model)")
    p.set_defaults(func=run_cli)


def check_cli(args) -> tuple[TensorParallelConfig, object]:
    """The run's config and results file, every check done before a process starts."""
    from transformers import AutoConfig

    from ..drafter.heads import check_head_spec

    cfg = TensorParallelConfig(**given_config_flags(args, TensorParallelConfig), target=args.target)
    try:
        config = AutoConfig.from_pretrained(resolve_target(cfg.target))
    except (OSError, ValueError) as exc:
        raise PeagleError(f"no config for target {cfg.target}: {exc}. Fix: a local model directory or a hub id "
                          "reachable from here.") from None
    cfg.check(config)
    head = check_head_spec(cfg.head)  # its checkpoint checked against its config
    if not head.exists():
        raise PeagleError(f"No drafter head at {head}. Fix: --head parallel (the shipped one) or the directory of a "
                          "head trained for this target.")
    path = results_path(cfg.out)
    validate.writable(path.parent, "--out", folder=True)
    check_results_file(path, cfg.overwrite)
    return cfg, path


def run_cli(args):
    cfg, path = check_cli(args)
    t0 = time.perf_counter()
    with lock.hold(path.parent):
        res = run_tensor_parallel(cfg, environment("cpu", torch.float32))
        write_json(path, res)
    print(f"hardware: {res['env']['hardware']}, {cfg.tp} ranks x 1 thread (gloo); {load_line(res['env'])}")
    print(format_table(res["rows"], ["tp", "decode_ms", "verify_ms", "parallel_draft_ms", "sequential_draft_ms",
                                     "parallel_draft_share", "sequential_draft_share"]))
    print(f"logits whole vs sharded: max |diff| {res['logits_max_abs_diff']}; one all-reduce of a decode step's "
          f"hidden state {res['all_reduce_ms']} ms, {res['all_reduces_per_pass']} per sharded pass")
    print(f"results: {path} ({time.perf_counter() - t0:.0f} s)")
    return 0
