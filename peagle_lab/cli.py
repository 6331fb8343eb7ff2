"""``peagle-lab`` command: prepare, extract, distill, train, generate, bench, export-vllm, serve.

Each subcommand lives beside the code it drives: a module offers ``register_cli(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# module -> the subcommands it registers (imported lazily only to build the parser)
_MODULES = ["peagle_lab.generate_cli", "peagle_lab.features", "peagle_lab.data", "peagle_lab.train",
            "peagle_lab.bench", "peagle_lab.serving"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="peagle-lab", description=__doc__.splitlines()[0])
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


def load_cli_target(args):
    """Apply --threads, then load --target on --device: ``(model, tokenizer, target name)``."""
    import torch

    from .models import load_target, target_name

    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    model, tokenizer = load_target(args.target, device=args.device)
    return model, tokenizer, args.target or target_name()


def _prepare(args):
    import time

    from .models import convert_default

    t0 = time.perf_counter()
    path = convert_default()
    print(f"embedded target ready at {path} ({time.perf_counter() - t0:.1f} s)")


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
