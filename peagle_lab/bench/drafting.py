"""Drafting cost per round: the P-EAGLE drafter in parallel mode (ONE pass over the new context slots and K-1
mask slots) against sequential mode (K passes, EAGLE-3), with the target's verification of K+1 tokens for
scale; the calls are interleaved within every repeat."""

from __future__ import annotations

import statistics
from typing import Callable

import torch

from ..decoding.draft_sources import HeadDrafter
from ..errors import PeagleError
from ..decoding.sampling import Sampling
from ..decoding.slots import Slots
from ..decoding.target_runner import TargetRunner
from ..timer import summarize, time_once
from .config import BenchConfig
from .inputs import as_prompt_ids, default_prompt_ids, describe_head, model_of, target_runner
from ..environment import environment
from .record import SCHEMA, finish_environment, rounded


@torch.no_grad()
def drafting_cost(head, runner_or_model, cfg: BenchConfig, tokenizer=None,
                  progress: Callable[[str], None] | None = None) -> dict:
    """Per-round drafter latency: parallel (ONE pass over ``cfg.new_slots`` + K-1 mask slots) vs sequential (K
    passes), for each K in ``cfg.draft_ks``.

    Realistic context: the target prefills a real prompt (the first of ``cfg.prompts``, else HumanEval 0), the
    drafter's cache holds that prompt, and one timed round is ``propose()`` with the last ``cfg.new_slots`` context
    slots as "newly committed" (what a round sees after ~1 accepted draft), exactly as the speculative loop calls
    it. After ``cfg.draft_warmup`` untimed rounds per K, ``cfg.draft_repeats`` repeats: parallel and sequential
    calls (and, with ``cfg.verify``, the target's verification of K+1 tokens) interleaved within every repeat, in
    alternating order. Returns a dict with per-K summaries and ``ratio_seq_over_par``.
    """
    model = model_of(runner_or_model)
    runner = runner_or_model if isinstance(runner_or_model, TargetRunner) else target_runner(model, head)
    device = runner.device
    env = environment(device, next(head.parameters()).dtype)
    prompt = as_prompt_ids(cfg.prompts[:1] if cfg.prompts else default_prompt_ids(tokenizer, 1), tokenizer)[0]
    ks, new_slots, verify = list(cfg.draft_ks), cfg.new_slots, cfg.verify
    if not new_slots < len(prompt):
        raise PeagleError(f"new_slots={new_slots} must be in [1, prompt length {len(prompt)}).")
    draft_fn, verify_fn = round_fns(head, runner, prompt, new_slots)
    samples, vsamples, step_samples = _time_rounds(draft_fn, verify_fn, ks, cfg, device, progress)
    runner.reset()
    start = len(prompt) - new_slots  # the drafter's cache holds the slots before the newly committed ones

    rows = [_row(k, samples, vsamples, step_samples, verify) for k in ks]
    out = {
        "schema": SCHEMA, "kind": "drafting_cost", "env": finish_environment(env),
        "config": {"ks": ks, "repeats": cfg.draft_repeats, "warmup": cfg.draft_warmup, "new_slots": new_slots,
                   "prompt_tokens": len(prompt), "drafter_cache_slots": start,
                   "head": describe_head(head),
                   "target_layers": model.config.num_hidden_layers},
        "rows": rows,
        "raw_s": {f"{m}_k{k}": [rounded(x, 6) for x in v] for (m, k), v in samples.items()},
    }
    if verify:
        step = summarize(step_samples)
        out["target_step_ms"] = rounded(step["median"] * 1e3, 3)
        out["target_step_iqr_ms"] = rounded(step["iqr"] * 1e3, 3)
    return out


def round_fns(head, runner, prompt, new_slots):
    """``draft_fn(mode, k)`` and ``verify_fn(k)``: one drafting round and one verification of K+1 tokens, as
    callables to time. The drafter's cache holds the prompt; a round sees the last ``new_slots`` slots as newly
    committed, as the loop calls ``propose``."""
    greedy = Sampling()
    runner.reset()
    logits, taps = runner.forward(prompt)
    first = int(logits[-1].argmax())
    slots = Slots.after_prefill(prompt, first, taps)  # slot t: token t+1 and taps at t (EAGLE shift)
    drafters = {m: HeadDrafter(head, m) for m in ("parallel", "sequential")}
    round_slots = slots.tail(new_slots)  # as if only the last new_slots were newly committed
    target_len = runner.length
    for d in drafters.values():
        d.reset()
        d.propose(slots, 1, greedy, None)  # the drafter's prefill over the prompt

    def draft_fn(mode, k):
        return lambda: drafters[mode].propose(round_slots, k, greedy, None)

    def verify_fn(k):
        def fn():
            runner.forward([first] * (k + 1))
            runner.crop(target_len)
        return fn

    return draft_fn, verify_fn


def _time_rounds(draft_fn, verify_fn, ks, cfg: BenchConfig, device, progress):
    """Interleaved timings: ``{(mode, k): [s]}`` per drafting round, ``{k: [s]}`` per verification of K+1
    tokens, ``[s]`` per plain decode step (the order of the two modes alternates)."""
    repeats, warmup, verify = cfg.draft_repeats, cfg.draft_warmup, cfg.verify
    samples = {(m, k): [] for m in ("parallel", "sequential") for k in ks}
    vsamples, step_samples = {k: [] for k in ks}, []
    for k in ks:  # warm-up
        for _ in range(warmup):
            draft_fn("parallel", k)()
            draft_fn("sequential", k)()
        if verify and warmup:
            verify_fn(k)()
    for r in range(repeats):
        for i, k in enumerate(ks):
            order = ("parallel", "sequential") if (r + i) % 2 == 0 else ("sequential", "parallel")
            for m in order:
                samples[(m, k)].append(time_once(draft_fn(m, k), device))
            if verify:
                vsamples[k].append(time_once(verify_fn(k), device))
        if verify:
            step_samples.append(time_once(verify_fn(0), device))
        if progress:
            progress(f"drafting cost: repeat {r + 1}/{repeats}")
    return samples, vsamples, step_samples


def _row(k, samples, vsamples, step_samples, verify) -> dict:
    """One K's line: medians and IQRs in ms, the sequential / parallel ratios (and verification's, with
    ``verify``)."""
    par, seq = summarize(samples[("parallel", k)]), summarize(samples[("sequential", k)])
    ratios = [s / p for s, p in zip(samples[("sequential", k)], samples[("parallel", k)])]
    row = {"k": k,
           "parallel_ms": rounded(par["median"] * 1e3, 3), "parallel_iqr_ms": rounded(par["iqr"] * 1e3, 3),
           "sequential_ms": rounded(seq["median"] * 1e3, 3), "sequential_iqr_ms": rounded(seq["iqr"] * 1e3, 3),
           "ratio_seq_over_par": rounded(seq["median"] / par["median"], 3),
           "ratio_paired_median": rounded(statistics.median(ratios), 3),
           "ratio_paired_iqr": rounded(summarize(ratios)["iqr"], 3),
           "parallel_passes": 1, "sequential_passes": k}
    if verify:
        v = summarize(vsamples[k])
        step_med = summarize(step_samples)["median"]
        row |= {"verify_ms": rounded(v["median"] * 1e3, 3), "verify_iqr_ms": rounded(v["iqr"] * 1e3, 3),
                "verify_ratio": rounded(v["median"] / step_med, 3),  # verify(K+1) / decode(1)
                "draft_ratio": rounded(par["median"] / step_med, 3)}  # parallel draft round / decode(1)
    return row
