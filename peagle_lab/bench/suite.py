"""The whole benchmark with one set of knobs: drafting cost and end to end, written to a
results folder (``QUICK``: CI sizes; ``FULL``: the committed runs)."""

from __future__ import annotations

from pathlib import Path

from .. import lock
from .drafting import drafting_cost
from .e2e import end_to_end
from .files import check_results_dir, write_results


QUICK = {"ks_parallel": [1, 2, 4], "ks_sequential": [1, 2], "draft_ks": [1, 2, 4, 8], "n_prompts": 2,
         "max_new_tokens": 24, "repeats": 1, "draft_repeats": 5, "pld_ks": [10]}
FULL = {"ks_parallel": list(range(1, 9)), "ks_sequential": list(range(1, 6)), "draft_ks": list(range(1, 11)),
        "n_prompts": 8, "max_new_tokens": 96, "repeats": 1, "draft_repeats": 15, "pld_ks": [10]}


def run_benchmark(model, tokenizer, parallel_head, sequential_head=None, *, out_dir=None, ks_parallel=None,
                  ks_sequential=None, draft_ks=None, n_prompts=None, max_new_tokens=None, repeats=None,
                  draft_repeats=None, pld_ks=None, quick: bool = False, drafting: bool = True,
                  e2e: bool = True, assistant=None, plots: bool = True, progress=None,
                  command: str | None = None, overwrite: bool = False) -> dict:
    """Drafting cost + end to end with one set of knobs (``quick``: CI sizes), written to ``out_dir``.

    Drafting cost uses ``parallel_head`` in both modes: the comparison is about one pass vs K passes of the
    same network. Returns ``{"drafting_cost", "end_to_end", "files", "out_dir"}``.
    """
    with lock.hold(out_dir):  # one writer per results folder (re-entrant: the CLI holds it already)
        return _run(model, tokenizer, parallel_head, sequential_head, out_dir, ks_parallel, ks_sequential, draft_ks,
                    n_prompts, max_new_tokens, repeats, draft_repeats, pld_ks, quick, drafting, e2e, assistant,
                    plots, progress, command, overwrite)


def _run(model, tokenizer, parallel_head, sequential_head, out_dir, ks_parallel, ks_sequential, draft_ks, n_prompts,
         max_new_tokens, repeats, draft_repeats, pld_ks, quick, drafting, e2e, assistant, plots, progress, command,
         overwrite) -> dict:
    base = QUICK if quick else FULL

    def knob(v, key):
        return list(v) if isinstance(v, (list, tuple, range)) else (v if v is not None else base[key])

    if out_dir is not None:
        check_results_dir(out_dir, next(model.parameters()).device, next(model.parameters()).dtype, overwrite)
    res = {}
    if drafting:
        res["drafting_cost"] = drafting_cost(parallel_head, model, tokenizer=tokenizer, ks=knob(draft_ks, "draft_ks"),
                                             repeats=knob(draft_repeats, "draft_repeats"), progress=progress)
    if e2e:
        res["end_to_end"] = end_to_end(
            model, tokenizer, parallel_head=parallel_head, sequential_head=sequential_head,
            parallel_ks=knob(ks_parallel, "ks_parallel"), sequential_ks=knob(ks_sequential, "ks_sequential"),
            n_prompts=knob(n_prompts, "n_prompts"), max_new_tokens=knob(max_new_tokens, "max_new_tokens"),
            repeats=knob(repeats, "repeats"), pld_ks=knob(pld_ks, "pld_ks"), assistant=assistant, progress=progress)
    if out_dir is not None:
        res["files"] = write_results(res, out_dir, plots=plots, command=command)
        res["out_dir"] = Path(out_dir)
    return res
