"""``peagle-lab`` command: prepare, extract, distill, train, generate, bench, export-vllm, serve.

Every command lives in this package, one module per family (:func:`_command_modules`): its options
(``register_cli(subparsers)``), its checks before a target loads and the run it drives, calling the library
rooms below, which never import this package (the target options every command shares are
:mod:`peagle_lab.target_args`).
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import PeagleError
from ..settings import prefer_passive_omp_wait

def _command_modules() -> list:
    """Each command family's module, in the order ``--help`` lists them: imported here, when the parser is built
    (after main() set the OpenMP policy: they import torch, so ``import peagle_lab.cli`` itself must not)."""
    from . import bench, distill, experiments, extract, generate, prepare, serve, targets, tensor_parallel, train

    return [prepare, generate, extract, distill, train, bench, tensor_parallel, serve, experiments, targets]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="peagle-lab", description=__doc__.splitlines()[0],
                                     epilog="--debug (anywhere) or PEAGLE_DEBUG=1: show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in _command_modules():
        module.register_cli(sub)
    return parser


def main(argv=None):
    """Run a command. The project's own errors (bad input, damaged files) print one line,
    ``peagle-lab: error: <message>``, and exit with 2; ``--debug`` or ``PEAGLE_DEBUG=1`` shows the traceback."""
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
