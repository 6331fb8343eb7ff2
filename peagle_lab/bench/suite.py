"""The whole benchmark with one set of knobs: drafting cost and end to end on each prompt suite (:mod:`.suites`),
written to a results folder (``QUICK``: CI sizes; ``FULL``: the committed runs)."""

from __future__ import annotations

from pathlib import Path

from .. import lock
from .drafting import drafting_cost
from .e2e import end_to_end
from .files import check_results_dir, write_results
from .suites import DEFAULT_SUITE, suite_list


QUICK = {"ks_parallel": [1, 2, 4], "ks_sequential": [1, 2], "draft_ks": [1, 2, 4, 8], "n_prompts": 2,
         "max_new_tokens": 24, "repeats": 1, "draft_repeats": 5, "pld_ks": [10], "oracle_ks": [4]}
# the oracle at the blog's K values (3, 5, 7): what the paper's acceptance would give here
FULL = {"ks_parallel": list(range(1, 9)), "ks_sequential": list(range(1, 6)), "draft_ks": list(range(1, 11)),
        "n_prompts": 24, "max_new_tokens": 96, "repeats": 1, "draft_repeats": 15, "pld_ks": [10],
        "oracle_ks": [3, 5, 7]}


def run_benchmark(model, tokenizer, parallel_head, sequential_head=None, *, out_dir=None, ks_parallel=None,
                  ks_sequential=None, draft_ks=None, n_prompts=None, max_new_tokens=None, repeats=None,
                  draft_repeats=None, pld_ks=None, quick: bool = False, drafting: bool = True,
                  e2e: bool = True, assistant=None, plots: bool = True, progress=None,
                  command: str | None = None, overwrite: bool = False, suite: str = DEFAULT_SUITE,
                  oracle_ks=None, oracle_accept="paper") -> dict:
    """Drafting cost + end to end on ``suite`` (``code``, ``chat`` or ``all``) with one set of knobs (``quick``:
    CI sizes), written to ``out_dir``; ``oracle_ks`` (``[]``: none) and ``oracle_accept``: the rated oracle
    (:mod:`.oracle`).

    Drafting cost uses ``parallel_head`` in both modes: the comparison is about one pass vs K passes of the
    same network. Returns ``{"drafting_cost", "suites": {suite: end to end}, "end_to_end"`` (the first suite's),
    ``"files", "out_dir"}``.
    """
    with lock.hold(out_dir):  # one writer per results folder (re-entrant: the CLI holds it already)
        return _run(model, tokenizer, parallel_head, sequential_head, out_dir, ks_parallel, ks_sequential, draft_ks,
                    n_prompts, max_new_tokens, repeats, draft_repeats, pld_ks, quick, drafting, e2e, assistant,
                    plots, progress, command, overwrite, suite, oracle_ks, oracle_accept)


def _run(model, tokenizer, parallel_head, sequential_head, out_dir, ks_parallel, ks_sequential, draft_ks, n_prompts,
         max_new_tokens, repeats, draft_repeats, pld_ks, quick, drafting, e2e, assistant, plots, progress, command,
         overwrite, suite, oracle_ks, oracle_accept) -> dict:
    base = QUICK if quick else FULL

    def knob(v, key):
        return list(v) if isinstance(v, (list, tuple, range)) else (v if v is not None else base[key])

    suites = suite_list(suite)  # a bad suite name fails before any measurement
    if out_dir is not None:
        check_results_dir(out_dir, next(model.parameters()).device, next(model.parameters()).dtype, overwrite)
    res = {}
    if drafting:
        res["drafting_cost"] = drafting_cost(parallel_head, model, tokenizer=tokenizer, ks=knob(draft_ks, "draft_ks"),
                                             repeats=knob(draft_repeats, "draft_repeats"), progress=progress)
    if e2e:
        res["suites"] = {}
        for name in suites:
            res["suites"][name] = end_to_end(
                model, tokenizer, parallel_head=parallel_head, sequential_head=sequential_head,
                parallel_ks=knob(ks_parallel, "ks_parallel"), sequential_ks=knob(ks_sequential, "ks_sequential"),
                n_prompts=knob(n_prompts, "n_prompts"), max_new_tokens=knob(max_new_tokens, "max_new_tokens"),
                repeats=knob(repeats, "repeats"), pld_ks=knob(pld_ks, "pld_ks"), assistant=assistant,
                progress=(lambda m, s=name: progress(f"[{s}] {m}")) if progress else None, suite=name,
                oracle_ks=knob(oracle_ks, "oracle_ks"), oracle_accept=oracle_accept)
        res["end_to_end"] = res["suites"][suites[0]]
    if out_dir is not None:
        res["files"] = write_results(res, out_dir, plots=plots, command=command)
        res["out_dir"] = Path(out_dir)
    return res
