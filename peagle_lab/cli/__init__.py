"""``peagle-lab`` command: prepare, extract, distill, train, generate, bench, export-vllm, serve.

Each command family's module offers ``register_cli(subparsers)`` (``prepare``, ``extract`` and ``generate`` here,
in :mod:`.prepare`, :mod:`.extract` and :mod:`.generate`; the others beside the code they drive, all named in
:func:`_command_modules`); this package imports the commands, they never import it (their shared target options
are :mod:`peagle_lab.target_args`).
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
    from .. import tiny_target
    from ..bench import cli as bench
    from ..distill import data as distill
    from ..experiments import heldout, recipe, studies
    from ..serving import cli as serving
    from ..training import cli as train
    from ..workbook import memory_plan
    from . import extract, generate, prepare

    return [prepare, generate, extract, distill, train, bench, serving, recipe, heldout, studies, tiny_target,
            memory_plan]


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
