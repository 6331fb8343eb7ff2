"""The whole benchmark with one :class:`.config.BenchConfig`: drafting cost and end to end on each prompt suite
(:mod:`.suites`), written to a results folder."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .. import lock
from .config import BenchConfig
from .drafting import drafting_cost
from .e2e import end_to_end
from .files import check_results_dir, write_results


def run_benchmark(model, tokenizer, cfg: BenchConfig, parallel_head, sequential_head=None, *, assistant=None,
                  progress=None, command: str | None = None) -> dict:
    """Drafting cost (unless ``cfg.skip_drafting``) + end to end on each of ``cfg.suites`` (unless
    ``cfg.skip_e2e``), written to ``cfg.out`` (nothing written when None; ``cfg.no_plots``: no figures;
    ``command``: the command line the README records).

    Drafting cost uses ``parallel_head`` in both modes: the comparison is about one pass vs K passes of the
    same network. Returns ``{"drafting_cost", "suites": {suite: end to end}, "end_to_end"`` (the first suite's),
    ``"files", "out_dir"}``.
    """
    with lock.hold(cfg.out):  # one writer per results folder (re-entrant: the CLI holds it already)
        if cfg.out is not None:
            param = next(model.parameters())
            check_results_dir(cfg.out, param.device, param.dtype, cfg.overwrite)
        res = {}
        if not cfg.skip_drafting:
            res["drafting_cost"] = drafting_cost(parallel_head, model, cfg, tokenizer=tokenizer, progress=progress)
        if not cfg.skip_e2e:
            res["suites"] = {}
            for name in cfg.suites:
                res["suites"][name] = end_to_end(
                    model, tokenizer, replace(cfg, suite=name), parallel_head=parallel_head,
                    sequential_head=sequential_head, assistant=assistant,
                    progress=(lambda m, s=name: progress(f"[{s}] {m}")) if progress else None)
            res["end_to_end"] = res["suites"][cfg.suites[0]]
        if cfg.out is not None:
            res["files"] = write_results(res, cfg.out, plots=not cfg.no_plots, command=command)
            res["out_dir"] = Path(cfg.out)
        return res
