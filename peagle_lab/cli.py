"""``peagle-lab`` command: prepare, extract, distill, train, generate, bench, export-vllm, serve.

Each subcommand lives beside the code it drives: a module offers ``register_cli(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# module -> the subcommands it registers (imported lazily only to build the parser)
_MODULES = ["peagle_lab.generate_cli", "peagle_lab.features", "peagle_lab.data", "peagle_lab.training.cli",
            "peagle_lab.bench.cli", "peagle_lab.serving.cli", "peagle_lab.recipe"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="peagle-lab", description=__doc__.splitlines()[0],
                                     epilog="--debug (anywhere) or PEAGLE_DEBUG=1: show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="download and convert the embedded default target once")
    prep.set_defaults(func=_prepare)
    for name in _MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError as exc:  # an optional dependency missing: the other commands still work
            print(f"[peagle-lab] {name} unavailable: {exc}", file=sys.stderr)
            continue
        if hasattr(mod, "register_cli"):
            mod.register_cli(sub)
    return parser


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
    import torch

    from .models import load_target, pick_device, target_name
    from .precision import describe_choice, resolve_dtype

    from . import validate

    if validate.threads(getattr(args, "threads", None)):
        torch.set_num_threads(args.threads)
    device = validate.device(args.device) if args.device else pick_device()
    dtype = resolve_dtype(getattr(args, "dtype", None), device)
    print(f"[peagle-lab] dtype: {describe_choice(dtype, device, getattr(args, 'dtype', None))}", file=sys.stderr)
    model, tokenizer = load_target(args.target, device=device, dtype=dtype)
    return model, tokenizer, args.target or target_name()


def _prepare(args):
    import time

    from .models import convert_default

    t0 = time.perf_counter()
    path = convert_default()
    print(f"embedded target ready at {path} ({time.perf_counter() - t0:.1f} s)")


def main(argv=None):
    """Run a command. The project's own errors (bad input, damaged files) print one line,
    ``peagle-lab: error: <message>``, and exit with 2; ``--debug`` or ``PEAGLE_DEBUG=1`` shows the traceback."""
    import os

    from .errors import PeagleError
    from .settings import prefer_passive_omp_wait

    prefer_passive_omp_wait()  # before building the parser imports torch (and before any process it starts)
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("PEAGLE_DEBUG", "0") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except PeagleError as exc:
        if debug:
            raise
        print(f"peagle-lab: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
