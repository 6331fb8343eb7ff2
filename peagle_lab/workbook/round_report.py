"""Committed benchmark runs read as AL over a round's cost (chapter 05): a round in decode steps, the paired-rule
line against plain decoding, the run's label, and the list-domain heads' report. Formatting only: every figure
comes from the run."""

from __future__ import annotations

import json

from ..bench.oracle import PAPER, constant_rate_acceptance_length, oracle_rates
from ..bench.suites import suite_of
from .notebook import committed_label
from .payoff import best, paired_verdict, prompts_faster


def round_steps(m: dict) -> float:
    """A round's cost in plain decode steps, from the loop's own medians: (t_draft + t_verify) / t_step."""
    return (m["t_draft_round_ms"] + m["t_verify_round_ms"]) / m["t_step_ms"]


def paper_target(suite: str, k: int = 7) -> tuple[float, str]:
    """The blog's acceptance length that the oracle replays on `suite`, and its benchmark: code replays HumanEval's
    3.94 at K=7, chat MT-Bench's 3.70."""
    name = {"blog-humaneval": "HumanEval", "blog-mtbench": "MT-Bench"}[PAPER.get(suite, PAPER["code"])]
    return constant_rate_acceptance_length(oracle_rates("paper", suite)[0][0], k), name


def against_plain(e2e_res: dict, m: dict) -> str:
    """The paired rule against plain decoding, in words: on how many prompts row `m` is faster end to end, the sign
    test's p and the verdict."""
    return paired_verdict(*prompts_faster(e2e_res, m))


def summary_label(host_run: dict, committed_run: dict) -> str:
    """The committed run's label line: host/dtype, suite, prompts x new tokens."""
    cfg = committed_run["config"]
    return committed_label(f"{host_run['dir']}, `{suite_of(committed_run)}` suite, {cfg['n_prompts']} prompts x "
                           f"{cfg['max_new_tokens']} new tokens")


def lists_label(lrun: dict, le: dict) -> str:
    """The lists run's label line: host/dtype, held-out prompts x new tokens."""
    return committed_label(f"{lrun['dir']}, `lists` suite, {le['config']['n_prompts']} held-out prompts x "
                           f"{le['config']['max_new_tokens']} new tokens")


def slot_rates(m: dict) -> str:
    """A row's per-slot acceptance rates, each with the number of rounds that reached its slot where the results
    file records it (``0.85 (412)``): a rate over a handful of rounds is not read as one over hundreds."""
    attempts = m.get("per_position_attempts") or [None] * len(m["per_position_acceptance"])
    return " ".join("not reached" if r is None else f"{r:.2f}" + ("" if n is None else f" ({n})")
                    for r, n in zip(m["per_position_acceptance"], attempts))


def print_list_heads(le: dict, heads: dict) -> None:
    """Prints each list head's training record, its best K's figures and the answers on which it is slower."""
    for (kind, path), (family, name) in zip(heads.items(), (("p-eagle", "P-EAGLE"), ("eagle3", "EAGLE-3"))):
        rec = json.loads((path / "training.json").read_text())  # the head's training record
        m = best(le, family)
        start = rec["config"]["init_from"]
        how = (f"{start.split('/')[-1]} continued {rec['train_time_s']:.0f} s" if start else
               f"seed {rec['config']['seed']}'s untrained weights, {rec['steps_done']:,} steps in "
               f"{rec['train_time_s']:.0f} s,")
        print(f"{name} head: {how} on {rec['data']['sequences']} answers ({rec['data']['response_tokens']:,} answer "
              f"tokens), {rec['tokens_seen']:,} tokens seen, {rec['machine']['host']}, {rec['autocast']}")
        print(f"  best at K={m['k']}: {m['speedup']:.2f}x end to end, AL {m['acceptance_length']:.2f}, a round of "
              f"{round_steps(m):.2f} steps; per-slot rates {slot_rates(m)}; against plain: {against_plain(le, m)}")
        slower = sorted(r["new_tokens"] for r in le["runs"] if r["method"] == m["method"] and r["speedup_vs_plain"] < 1)
        print(f"  slower than plain on {len(slower)} prompts, whose answers have {slower} tokens (the budget is "
              f"{le['config']['max_new_tokens']})")
