"""``peagle-lab`` command: prepare, extract, distill, train, generate, bench, export-vllm, serve.

Each subcommand lives beside the code it drives: a module offers ``register_cli(subparsers)`` (``prepare``,
``extract`` and ``generate`` here, in :mod:`.prepare`, :mod:`.extract` and :mod:`.generate`); this package
imports the commands, they never import it (their shared target options are :mod:`peagle_lab.target_args`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ..errors import PeagleError
from ..settings import prefer_passive_omp_wait

# module -> the subcommands it registers, imported only to build the parser: after main() set the OpenMP policy,
# since they import torch (so `import peagle_lab.cli` itself must not)
_MODULES = ["peagle_lab.cli.prepare", "peagle_lab.cli.generate", "peagle_lab.cli.extract",
            "peagle_lab.distill.data", "peagle_lab.training.cli", "peagle_lab.bench.cli", "peagle_lab.serving.cli",
            "peagle_lab.experiments.recipe", "peagle_lab.experiments.heldout", "peagle_lab.experiments.studies", "peagle_lab.tiny_target",
            "peagle_lab.workbook.memory_plan"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="peagle-lab", description=__doc__.splitlines()[0],
                                     epilog="--debug (anywhere) or PEAGLE_DEBUG=1: show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in _MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError as exc:  # an optional dependency missing: the other commands still work
            print(f"[peagle-lab] {name} unavailable: {exc}", file=sys.stderr)
            continue
        if hasattr(mod, "register_cli"):
            mod.register_cli(sub)
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
