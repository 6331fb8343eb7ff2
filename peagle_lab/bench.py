"""Measure it: drafting cost (parallel vs sequential) and end-to-end speed of speculative decoding.

Conventions (REFERENCE.md "Benchmarking conventions", DESIGN.md "Timing"):

* greedy, batch 1, the same prompts and output length for every method; warm-up first; medians and the
  interquartile range (IQR) over repeats, never a single run;
* methods are **interleaved** (per prompt, per repeat, in a rotating order), so drift in the machine's speed
  (other jobs, thermal) hits all of them alike, and every speed-up is a ratio to plain decoding measured
  **in the same run**;
* every speculative output is compared with plain greedy decoding token for token, and the result says so;
* every result carries an environment record (hardware, threads, dtype, versions, git commit, load average
  at the start and the end): a timing without its machine means little.

Timers and the environment record: :mod:`peagle_lab.timing`; files and tables: :mod:`peagle_lab.bench_files`;
figures: :mod:`peagle_lab.bench_plots` (all re-exported here).

Entry points: :func:`drafting_cost`, :func:`end_to_end`, :func:`run_benchmark` (both, files and plots),
:func:`write_results` / :func:`load_results`, the ``plot_*`` functions and the ``peagle-lab bench`` command.
"""

from __future__ import annotations

import json
import math
import statistics
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Sequence

import torch

from .bench_files import (SCHEMA, committed_results, format_table, headline, hosts_table,  # noqa: F401 (API)
                          load_results, results_readme, write_results)
from .bench_plots import (break_even_inputs, draw_plots, plot_acceptance, plot_break_even,  # noqa: F401
                          plot_drafting_cost, plot_round_profile, plot_speedup)
from .errors import PeagleError
from .timing import (environment, finish_environment, summarize, synchronize, time_once,  # noqa: F401 (API)
                     time_repeated)

ASSISTED_NOT_RUN = ("not run: transformers' assisted generation needs a small draft LM that shares the target's "
                    "tokenizer, and none is available offline here (SmolLM2-135M is the smallest SmolLM2). "
                    "Pass one with `peagle-lab bench --assistant PATH`.")


# ============================================================================================ helpers
def _model_of(runner_or_model):
    from .speculative import TargetRunner

    return runner_or_model.model if isinstance(runner_or_model, TargetRunner) else runner_or_model


def _runner_for(model, head):
    from .speculative import TargetRunner

    return TargetRunner(model, head.config.aux_hidden_state_layer_ids)


def _default_prompt_ids(tokenizer, n: int = 1) -> list[list[int]]:
    from .prompts import chat_ids, humaneval_prompts

    if tokenizer is None:
        raise PeagleError("No prompts given and no tokenizer to build HumanEval prompts with. "
                          "Fix: pass tokenizer=... or prompts=[[token ids], ...].")
    return [chat_ids(tokenizer, text) for text in humaneval_prompts(n)]


def _as_prompt_ids(prompts, tokenizer) -> list[list[int]]:
    from .prompts import chat_ids

    out = []
    for p in prompts:
        if isinstance(p, str):
            if tokenizer is None:
                raise PeagleError("Text prompts need a tokenizer. Fix: pass tokenizer=... or token id lists.")
            out.append(chat_ids(tokenizer, p))
        else:
            out.append([int(t) for t in (p.tolist() if torch.is_tensor(p) else p)])
    if not out or any(len(p) < 3 for p in out):
        raise PeagleError("Every prompt needs at least 3 tokens (the drafter is fed the prompt's last slots).")
    return out


def _r(x, nd=5):
    if x is None:
        return None
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return round(float(x), nd)


def head_description(head, source: str) -> dict:
    c = head.config
    return {"source": source, "mode": c.mode, "num_hidden_layers": c.num_hidden_layers,
            "trained_k": c.num_speculative_tokens, "draft_vocab_size": c.draft_vocab_size,
            "taps": list(c.aux_hidden_state_layer_ids), "mask_token_id": c.mask_token_id,
            "params": sum(p.numel() for p in head.parameters())}


def _describe(head):
    return None if head is None else head_description(head, getattr(head, "_bench_source", "given"))


def fresh_head(model, mode: str = "parallel", mask_token_id: int | None = None, num_hidden_layers: int = 1,
               tokenizer=None):
    """An UNTRAINED head shaped for ``model`` (target embeddings, norm and lm_head; random layers). Its drafting
    cost is that of a trained head of the same shape; its acceptance is not.

    ``mask_token_id``: default :func:`peagle_lab.vocab.mask_token_id_for` (picked from ``tokenizer``, or from the
    tokenizer saved beside the model), as training picks it."""
    from .drafter import PEagleConfig, PEagleDrafter
    from .vocab import mask_token_id_for

    if mask_token_id is None:
        mask_token_id = mask_token_id_for(model, tokenizer, untrained=True)
    cfg = PEagleConfig.from_target(model.config, mask_token_id=mask_token_id, mode=mode,
                                   num_hidden_layers=num_hidden_layers)
    device = next(model.parameters()).device
    return PEagleDrafter(cfg).init_from_target(model).to(device).eval()


def load_head_or_fresh(kind_or_path, model, mode: str | None = None, tokenizer=None):
    """``(head, description)``: the shipped/given head when it exists, else a freshly initialised (untrained) one.

    ``kind_or_path``: ``'parallel'`` / ``'sequential'`` (shipped heads), a directory, or ``'fresh'``. ``tokenizer``
    picks a fresh head's mask token (default: the tokenizer saved beside the model).
    """
    from .heads import SHIPPED, load_head

    mode = mode or (kind_or_path if kind_or_path in ("parallel", "sequential") else "parallel")
    path = SHIPPED.get(str(kind_or_path), Path(str(kind_or_path)))
    if str(kind_or_path) != "fresh" and path.exists():
        head = load_head(kind_or_path, model)
        from .settings import display_path

        return head, head_description(head, display_path(path))
    head = fresh_head(model, mode=mode, tokenizer=tokenizer)
    why = "requested" if str(kind_or_path) == "fresh" else f"no head at {path}"
    return head, head_description(head, f"fresh-init (untrained; {why})")


# ============================================================================================ drafting cost
@torch.no_grad()
def drafting_cost(head, runner_or_model, prompt_ids=None, tokenizer=None, ks: Sequence[int] = range(1, 11),
                  repeats: int = 20, warmup: int = 3, new_slots: int = 2, verify: bool = True,
                  progress: Callable[[str], None] | None = None) -> dict:
    """Per-round drafter latency: parallel (ONE pass over ``new_slots`` + K-1 mask slots) vs sequential (K passes).

    Realistic context: the target prefills a real prompt (HumanEval 0 by default), the drafter's cache holds
    that prompt, and one timed round is ``propose()`` with the last ``new_slots`` context slots as "newly
    committed" (what a round sees after ~1 accepted draft), exactly as the speculative loop calls it. Parallel
    and sequential calls (and, with ``verify``, the target's verification of K+1 tokens) are interleaved within
    every repeat, in alternating order. Returns a dict with per-K summaries and ``ratio_seq_over_par``.
    """
    from .speculative import HeadDrafter, Sampling, TargetRunner

    model = _model_of(runner_or_model)
    runner = runner_or_model if isinstance(runner_or_model, TargetRunner) else _runner_for(model, head)
    device = runner.device
    dtype = next(head.parameters()).dtype
    env = environment(device, dtype)
    if prompt_ids is None:
        prompt_ids = _default_prompt_ids(tokenizer, 1)[0]
    prompt = _as_prompt_ids([prompt_ids], tokenizer)[0]
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1:
        raise PeagleError(f"ks must be a non-empty list of K >= 1, got {ks}.")
    if not 1 <= new_slots < len(prompt):
        raise PeagleError(f"new_slots={new_slots} must be in [1, prompt length {len(prompt)}).")
    greedy = Sampling()

    runner.reset()
    logits, taps = runner.forward(prompt)
    first = int(logits[-1].argmax())
    ctx_tokens = prompt[1:] + [first]  # slot t: token t+1 and taps at t (EAGLE shift)
    n = len(ctx_tokens)
    drafters = {m: HeadDrafter(head, m) for m in ("parallel", "sequential")}
    round_tokens, round_taps, start = ctx_tokens[-new_slots:], taps[-new_slots:], n - new_slots
    target_len = runner.length

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # K above the head's trained K: timing is what we want here
        for d in drafters.values():
            d.reset()
            d.propose(ctx_tokens, taps, 0, 1, greedy, None)  # the drafter's prefill over the prompt

        def draft_fn(mode, k):
            return lambda: drafters[mode].propose(round_tokens, round_taps, start, k, greedy, None)

        def verify_fn(k):
            ids = [first] + [first] * k

            def fn():
                runner.forward(ids)
                runner.crop(target_len)
            return fn

        samples = {(m, k): [] for m in ("parallel", "sequential") for k in ks}
        vsamples = {k: [] for k in ks}
        for k in ks:  # warm-up
            for _ in range(warmup):
                draft_fn("parallel", k)()
                draft_fn("sequential", k)()
            if verify and warmup:
                verify_fn(k)()
        step_samples = []
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
    runner.reset()

    rows = []
    for k in ks:
        par, seq = summarize(samples[("parallel", k)]), summarize(samples[("sequential", k)])
        ratios = [s / p for s, p in zip(samples[("sequential", k)], samples[("parallel", k)])]
        row = {"k": k,
               "parallel_ms": _r(par["median"] * 1e3, 3), "parallel_iqr_ms": _r(par["iqr"] * 1e3, 3),
               "sequential_ms": _r(seq["median"] * 1e3, 3), "sequential_iqr_ms": _r(seq["iqr"] * 1e3, 3),
               "ratio_seq_over_par": _r(seq["median"] / par["median"], 3),
               "ratio_paired_median": _r(statistics.median(ratios), 3),
               "ratio_paired_iqr": _r(summarize(ratios)["iqr"], 3),
               "parallel_passes": 1, "sequential_passes": k}
        if verify:
            v = summarize(vsamples[k])
            step_med = summarize(step_samples)["median"]
            row |= {"verify_ms": _r(v["median"] * 1e3, 3), "verify_iqr_ms": _r(v["iqr"] * 1e3, 3),
                    "verify_ratio": _r(v["median"] / step_med, 3),  # verify(K+1) / decode(1)
                    "draft_ratio": _r(par["median"] / step_med, 3)}  # parallel draft round / decode(1)
        rows.append(row)
    out = {
        "schema": SCHEMA, "kind": "drafting_cost", "env": finish_environment(env),
        "config": {"ks": ks, "repeats": repeats, "warmup": warmup, "new_slots": new_slots,
                   "prompt_tokens": len(prompt), "drafter_cache_slots": start,
                   "head": _describe(head),
                   "target_layers": model.config.num_hidden_layers},
        "rows": rows,
        "raw_s": {f"{m}_k{k}": [_r(x, 6) for x in v] for (m, k), v in samples.items()},
    }
    if verify:
        step = summarize(step_samples)
        out["target_step_ms"] = _r(step["median"] * 1e3, 3)
        out["target_step_iqr_ms"] = _r(step["iqr"] * 1e3, 3)
    return out


# ============================================================================================ fast-path A/B
@torch.no_grad()
def fastpath_ab(head, runner_or_model, prompt_ids=None, tokenizer=None, k: int = 7, repeats: int = 15,
                progress: Callable[[str], None] | None = None) -> dict:
    """Before/after timings of the cuts the loop makes, interleaved per repeat on the same prompt:

    * ``prefill``: the target's lm_head over every prompt position (before) or the last one only (after);
    * ``draft``: the drafter's lm_head over every slot of a parallel round (before) or the K draft slots only.
    """
    from .speculative import TargetRunner

    model = _model_of(runner_or_model)
    runner = runner_or_model if isinstance(runner_or_model, TargetRunner) else _runner_for(model, head)
    device = runner.device
    env = environment(device, next(model.parameters()).dtype)
    prompt = _as_prompt_ids([prompt_ids if prompt_ids is not None else _default_prompt_ids(tokenizer, 1)[0]],
                            tokenizer)[0]

    def prefill(last_only):
        def fn():
            runner.reset()
            runner.forward(prompt, last_only=last_only)
        return fn

    runner.reset()
    _, taps = runner.forward(prompt, last_only=True)
    n = len(prompt)
    hidden = head.fuse(taps.to(next(head.parameters()).dtype)[None])
    mask = head.mask_slot_hidden().to(hidden.dtype).expand(1, k - 1, -1)
    tokens = torch.tensor([prompt[1:] + [prompt[-1]] + [head.config.mask_token_id] * (k - 1)], device=device)
    hid = torch.cat([hidden, mask], dim=1)
    pos = torch.arange(0, n + k - 1, device=device)[None]

    def draft(logits_from):
        return lambda: head(tokens, hid, pos, cache=head.new_cache(), logits_from=logits_from)

    from .fastpath import fp32_lm_head, undo_fp32_lm_head

    def step(tokens_n, fp32_head):  # one target pass of tokens_n over the prefilled prompt, then rolled back
        ids = [prompt[-1]] * tokens_n

        def fn():
            (fp32_lm_head if fp32_head else undo_fp32_lm_head)(model)
            runner.forward(ids)
            runner.crop(n)
        return fn

    cases = {"prefill": (prefill(False), prefill(True)), "draft": (draft(0), draft(n - 1))}
    if next(model.parameters()).dtype == torch.bfloat16 and device.type == "cpu":
        cases |= {"decode_lm_head": (step(1, False), step(1, True)),
                  "verify_lm_head": (step(k + 1, False), step(k + 1, True))}
    samples = {(c, w): [] for c in cases for w in ("before", "after")}
    for fns in cases.values():
        fns[0](), fns[1]()  # warm-up
    for r in range(repeats):
        for c, (before, after) in cases.items():
            order = (("before", before), ("after", after)) if r % 2 == 0 else (("after", after), ("before", before))
            for w, fn in order:
                samples[(c, w)].append(time_once(fn, device))
        if progress:
            progress(f"fast-path A/B: repeat {r + 1}/{repeats}")
    runner.reset()
    undo_fp32_lm_head(model)  # leave the model as load_target made it
    what = {"prefill": f"target prefill of {n} tokens: lm_head over all positions -> last position only",
            "decode_lm_head": "target decode step (1 token): bf16 lm_head -> fp32 copy of the lm_head",
            "verify_lm_head": f"target verification of {k + 1} tokens: bf16 lm_head -> fp32 copy of the lm_head",
            "draft": f"drafter parallel pass over {n} context + {k - 1} mask slots: lm_head over all slots -> "
                     f"the {k} draft slots only"}
    rows = []
    for c in cases:
        b, a = summarize(samples[(c, "before")])["median"], summarize(samples[(c, "after")])["median"]
        rows.append({"case": c, "what": what[c], "before_ms": _r(b * 1e3, 3), "after_ms": _r(a * 1e3, 3),
                     "speedup": _r(b / a, 3)})
    return {"schema": SCHEMA, "kind": "fastpath_ab", "env": finish_environment(env),
            "config": {"k": k, "repeats": repeats, "prompt_tokens": n}, "rows": rows}


# ============================================================================================ end to end
@dataclass
class MethodRun:
    tokens: list
    seconds: float
    stats: dict | None = None  # SpecStats.as_dict() for our loop
    target_forwards: int | None = None
    result: object = None  # the GenerationResult (plain: its logit margins explain bf16 divergences)


@dataclass
class Method:
    """One decoding method in the sweep. ``run(prompt_ids, max_new_tokens) -> MethodRun``.

    ``family``: ``plain`` | ``p-eagle`` | ``eagle3`` | ``hf-greedy`` | ``prompt-lookup`` | ``assisted`` | other.
    ``reference``: whose greedy output it must reproduce (``plain``: our KV-cached greedy loop).
    """

    name: str
    family: str
    k: int | None
    run: Callable[[list, int], MethodRun]
    reference: str = "plain"
    info: dict = field(default_factory=dict)


def plain_method(runner, eos_id=None) -> Method:
    from .speculative import plain_generate

    def run(prompt, max_new):
        res = plain_generate(runner, prompt, max_new, eos_ids=eos_id)
        return MethodRun(res.tokens, res.seconds, res.stats.as_dict(), res.stats.target_forwards, result=res)

    return Method("plain", "plain", None, run, reference="plain")


def spec_stats_dict(stats) -> dict:
    """``SpecStats.as_dict()`` plus the raw counts the aggregation sums over prompts."""
    return stats.as_dict() | {"accepted_total": int(sum(stats.accepted)), "accepted_at": list(stats.accepted_at),
                              "attempted_at": list(stats.attempted_at)}


def head_method(runner, head, mode: str, k: int, family: str, eos_id=None) -> Method:
    from .speculative import HeadDrafter, speculative_generate

    drafter = HeadDrafter(head, mode)

    def run(prompt, max_new):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # K above the trained K: measured, and noted in the results
            res = speculative_generate(runner, drafter, prompt, k, max_new, eos_ids=eos_id)
        return MethodRun(res.tokens, res.seconds, spec_stats_dict(res.stats), res.stats.target_forwards)

    return Method(f"{family} K={k}", family, k, run, info={"mode": mode})


class _ForwardCounter:
    """Counts the target's forward calls (one per verification round inside ``generate``)."""

    def __init__(self, model):
        self.n = 0
        self.handle = model.register_forward_hook(self._hook)

    def _hook(self, *args):
        self.n += 1

    def close(self):
        self.handle.remove()


def hf_method(model, family: str, k: int | None = None, eos_id=None, pad_id=None, assistant=None) -> Method:
    """transformers ``generate``: greedy, prompt-lookup (``k`` = ``prompt_lookup_num_tokens``) or assisted."""
    device = next(model.parameters()).device
    kwargs = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    if eos_id is not None:
        kwargs["eos_token_id"] = eos_id
    kwargs["pad_token_id"] = pad_id if pad_id is not None else eos_id
    if family == "prompt-lookup":
        kwargs["prompt_lookup_num_tokens"] = int(k)
        name = f"prompt-lookup K={k}"
    elif family == "assisted":
        kwargs["assistant_model"] = assistant
        name = "assisted"
    else:
        name = "hf-greedy"

    @torch.no_grad()
    def run(prompt, max_new):
        ids = torch.tensor([prompt], dtype=torch.long, device=device)
        counter = _ForwardCounter(model)
        try:
            synchronize(device)
            t0 = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, **kwargs)
            synchronize(device)
            seconds = time.perf_counter() - t0
        finally:
            counter.close()
        return MethodRun(out[0, len(prompt):].tolist(), seconds, None, counter.n)

    return Method(name, family, k, run, reference="plain" if family == "hf-greedy" else "hf-greedy")


def _rounds_from(run: MethodRun) -> int | None:
    if run.stats and run.stats.get("rounds") is not None and run.stats.get("k"):
        return run.stats["rounds"]
    if run.target_forwards:
        return max(run.target_forwards - 1, 0)  # one prefill, then one forward per round/step
    return None


@torch.no_grad()
def end_to_end(model, tokenizer=None, *, parallel_head=None, sequential_head=None,
               parallel_ks: Sequence[int] = (1, 2, 4, 8), sequential_ks: Sequence[int] = (1, 2, 3, 4, 5),
               prompts=None, n_prompts: int = 8, max_new_tokens: int = 96, pld_ks: Sequence[int] = (10,),
               hf_greedy: bool = True, assistant=None, repeats: int = 1, warmup: bool = True,
               extra_methods: Sequence[Method] = (), eos_id=None,
               progress: Callable[[str], None] | None = None) -> dict:
    """End-to-end greedy decoding at batch 1 on HumanEval prompts, all methods interleaved per prompt.

    Methods: plain KV-cached greedy (``speculative.plain_generate``, the baseline), P-EAGLE (``parallel_head``
    in parallel mode) for each K in ``parallel_ks``, EAGLE-3 (``sequential_head`` in sequential mode) for each K
    in ``sequential_ks``, transformers' ``generate`` greedy and prompt-lookup decoding (``pld_ks``), and
    assisted generation when an ``assistant`` model is given. Per method: tokens/s, speed-up vs plain (same
    run), acceptance length, per-position acceptance, ideal speed-up from measured costs, efficiency, and
    whether every output equals plain greedy.

    ``speedup``: end-to-end tokens/s ratio to plain decoding (prefill included: what a user sees).
    ``decode_speedup``: the same after the prefill (our loop's timer splits it off); ``ideal_speedup`` =
    AL * t_step / (t_draft_round + t_verify_round) from the medians of this run models that phase, so
    ``efficiency`` = decode_speedup / ideal_speedup: what acceptance bookkeeping, cache rollback and Python take.
    """
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    env = environment(device, dtype)
    if eos_id is None and tokenizer is not None:
        eos_id = tokenizer.eos_token_id
    pad_id = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None
    if prompts is not None:
        prompt_ids = _as_prompt_ids(prompts, tokenizer)
    else:
        prompt_ids = _default_prompt_ids(tokenizer, n_prompts)
    if max_new_tokens < 1 or repeats < 1:
        raise PeagleError("max_new_tokens and repeats must be >= 1.")

    from .speculative import BF16_TIE_ULPS, TargetRunner, first_divergence

    runners = {}  # one TargetRunner per tap set (heads trained on different taps each get theirs)

    def runner_for(head):
        taps = tuple(head.config.aux_hidden_state_layer_ids) if head is not None else None
        if taps not in runners:
            runners[taps] = TargetRunner(model, taps)
        return runners[taps]

    runner = runner_for(parallel_head or sequential_head)
    methods = [plain_method(runner, eos_id)]
    if parallel_head is not None:
        methods += [head_method(runner_for(parallel_head), parallel_head, "parallel", int(k), "p-eagle", eos_id)
                    for k in parallel_ks]
    if sequential_head is not None:
        methods += [head_method(runner_for(sequential_head), sequential_head, "sequential", int(k), "eagle3", eos_id)
                    for k in sequential_ks]
    if hf_greedy:
        methods.append(hf_method(model, "hf-greedy", None, eos_id, pad_id))
    methods += [hf_method(model, "prompt-lookup", int(k), eos_id, pad_id) for k in pld_ks]
    if assistant is not None:
        methods.append(hf_method(model, "assisted", None, eos_id, pad_id, assistant=assistant))
    methods += list(extra_methods)
    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise PeagleError(f"Method names must be unique, got {names}.")

    if warmup:  # one short untimed run per method (allocations, lazy init, caches)
        for m in methods:
            m.run(prompt_ids[0], min(8, max_new_tokens))
    runs = []  # one row per (repeat, prompt, method)
    for r in range(repeats):
        for i, prompt in enumerate(prompt_ids):
            rot = (r * len(prompt_ids) + i) % len(methods)
            order = methods[rot:] + methods[:rot]
            got = {}
            for m in order:
                got[m.name] = m.run(prompt, max_new_tokens)
            base = got["plain"]
            for m in methods:  # rows in a fixed order; execution order was rotated
                ref = got.get(m.reference, base)
                run = got[m.name]
                rounds = _rounds_from(run)
                tokens = len(run.tokens)
                div = first_divergence(run.tokens, base.result, dtype) if m.name != "plain" else None
                runs.append({
                    "repeat": r, "prompt": i, "method": m.name, "family": m.family, "k": m.k,
                    "order": order.index(m), "prompt_tokens": len(prompt), "new_tokens": tokens,
                    "seconds": run.seconds, "tokens_per_s": tokens / run.seconds if run.seconds > 0 else None,
                    "speedup_vs_plain": base.seconds / run.seconds if tokens == len(base.tokens) else
                    (tokens / run.seconds) / (len(base.tokens) / base.seconds),
                    "identical_to_plain": run.tokens == base.tokens,
                    "reference": m.reference if m.reference in got else "plain",
                    "identical_to_reference": run.tokens == ref.tokens,
                    "divergence": div.as_dict() if div is not None else None,
                    "rounds": rounds,
                    "target_forwards": run.target_forwards,
                    "stats": run.stats,
                    "tokens": run.tokens if m.name == "plain" else None,
                })
            if progress:
                progress(f"end to end: repeat {r + 1}/{repeats}, prompt {i + 1}/{len(prompt_ids)}")

    summary, profile = _aggregate(methods, runs)
    regime = lossless_regime(dtype)

    def ok(x):  # fp32: token for token; bf16: identical, or first divergence at a near-tie of the plain run
        if x["identical_to_reference"]:
            return True
        return regime != "exact" and x["divergence"] is not None and x["divergence"]["near_tie"]

    lossless = {m.name: all(ok(x) for x in runs if x["method"] == m.name) for m in methods}
    for row in summary:
        rows = [x for x in runs if x["method"] == row["method"]]
        divs = [x["divergence"] for x in rows if x["divergence"] is not None]
        row["lossless"] = lossless[row["method"]]
        row["lossless_regime"] = regime
        row["divergences"] = len(divs)
        row["max_divergence_margin"] = _r(max(d["margin"] for d in divs), 5) if divs else None
        row["lossless_note"] = lossless_note(regime, len(rows), divs)
    hf_vs_plain = lossless.get("hf-greedy")
    notes = []
    bad = [n for n, ok in lossless.items() if not ok and n != "hf-greedy"]
    if bad:
        msg = (f"LOSSLESSNESS BROKEN: {bad} produced output different from greedy decoding (ours, or transformers' "
               "for its own speculative methods)" + (" at a position that is no near-tie" if regime != "exact" else "")
               + ". Their speed-ups are not valid comparisons.")
        notes.append(msg)
        warnings.warn(msg, stacklevel=2)
    if hf_vs_plain is False:
        notes.append("transformers' greedy generate differs from our plain greedy loop on some prompt "
                     "(numerics of a different attention/cache path); prompt-lookup / assisted are checked against "
                     "transformers' greedy output, their own baseline.")
    for m in methods:
        k, trained = m.k, None
        if m.family == "p-eagle" and parallel_head is not None:
            trained = parallel_head.config.num_speculative_tokens
        if m.family == "eagle3" and sequential_head is not None:
            trained = sequential_head.config.num_speculative_tokens
        if trained and k and k > trained:
            notes.append(f"{m.name}: K above the K={trained} the head was trained for.")
    out = {
        "schema": SCHEMA, "kind": "end_to_end", "env": finish_environment(env),
        "config": {"n_prompts": len(prompt_ids), "max_new_tokens": max_new_tokens, "repeats": repeats,
                   "warmup": warmup, "greedy": True, "batch_size": 1, "prompts": "HumanEval" if prompts is None
                   else "given", "prompt_tokens": [len(p) for p in prompt_ids],
                   "parallel_ks": list(parallel_ks) if parallel_head is not None else [],
                   "sequential_ks": list(sequential_ks) if sequential_head is not None else [],
                   "pld_ks": list(pld_ks), "methods": names,
                   "parallel_head": _describe(parallel_head), "sequential_head": _describe(sequential_head),
                   "target_layers": model.config.num_hidden_layers,
                   "target_params": sum(p.numel() for p in model.parameters())},
        "all_lossless": all(v for n, v in lossless.items() if n != "hf-greedy"),
        "lossless": lossless,
        "lossless_regime": regime,
        "bf16_tie_ulps": BF16_TIE_ULPS if regime != "exact" else None,
        "hf_greedy_identical_to_plain": hf_vs_plain,
        "assisted_generation": "run" if assistant is not None else ASSISTED_NOT_RUN,
        "methods": summary,
        "round_profile": profile,
        "runs": runs,  # per (repeat, prompt, method); "tokens" kept for the plain baseline only
        "notes": notes,
    }
    return out


def lossless_regime(dtype) -> str:
    """``exact`` (fp32: token for token) or ``near-tie`` (bf16: divergences only where the plain run's top-2
    logits are within bf16 resolution, see ``speculative.tie_bound``)."""
    return "exact" if dtype in (torch.float32, torch.float64) else "near-tie"


def lossless_note(regime: str, n_runs: int, divs: list[dict]) -> str:
    """The lossless column in words: which regime, how many outputs diverged, the largest margin among them."""
    if regime == "exact":
        bad = len(divs)
        return "exact: identical to plain greedy" if not bad else f"exact: {bad}/{n_runs} outputs DIFFER"
    if not divs:
        return f"bf16: {n_runs}/{n_runs} identical to plain bf16 greedy"
    ties = sum(d["near_tie"] for d in divs)
    worst = max(d["margin"] for d in divs)
    return (f"bf16: {len(divs)}/{n_runs} diverge, {ties} at near-ties; largest margin {worst:.3g}"
            + ("" if ties == len(divs) else " (NOT a near-tie)"))


def _aggregate(methods: list[Method], runs: list[dict]):
    """Per-method summary rows and per-round time profiles, from the per-run rows of ONE run."""
    by = {m.name: [x for x in runs if x["method"] == m.name] for m in methods}
    plain = by["plain"]
    plain_tps = sum(x["new_tokens"] for x in plain) / sum(x["seconds"] for x in plain)

    def per_run(rows, phase):
        out = []
        for x in rows:
            st = x["stats"] or {}
            t = (st.get("time_s") or {}).get(phase)
            n = x["rounds"] if phase != "decode" else max(x["target_forwards"] - 1, 0)
            if t is not None and n:
                out.append(t / n)
        return out

    t_step = summarize(per_run(plain, "decode"))["median"]  # one plain decode step, same run

    def decode_tps(rows):
        """Tokens/s after the prefill (the first token comes from the prefill): the phase the ideal models."""
        pre = [(x["stats"] or {}).get("time_s", {}).get("prefill") for x in rows]
        if any(p is None for p in pre):
            return None
        secs = sum(x["seconds"] for x in rows) - sum(pre)
        return (sum(x["new_tokens"] for x in rows) - len(rows)) / secs if secs > 0 else None

    plain_decode_tps = decode_tps(plain)
    summary, profile = [], []
    for m in methods:
        rows = by[m.name]
        toks = sum(x["new_tokens"] for x in rows)
        secs = sum(x["seconds"] for x in rows)
        tps = toks / secs
        sp = summarize([x["speedup_vs_plain"] for x in rows])
        row = {"method": m.name, "family": m.family, "k": m.k, "runs": len(rows), "new_tokens": toks,
               "seconds": _r(secs, 4), "tokens_per_s": _r(tps, 3), "speedup": _r(tps / plain_tps, 4),
               "speedup_median_per_prompt": _r(sp["median"], 4), "speedup_iqr": _r(sp["iqr"], 4),
               "decode_speedup": None,
               "lossless": all(x["identical_to_reference"] for x in rows),
               "identical_to_plain": all(x["identical_to_plain"] for x in rows)}
        stats = [x["stats"] for x in rows if x["stats"] and x["stats"].get("k")]
        if stats:  # our speculative loop: exact accounting from SpecStats' counts
            rounds = sum(s["rounds"] for s in stats)
            k = stats[0]["k"]
            accepted = sum(s["accepted_total"] for s in stats)
            acc_at = [sum(s["accepted_at"][j] for s in stats) for j in range(k)]
            att_at = [sum(s["attempted_at"][j] for s in stats) for j in range(k)]
            al = 1.0 + accepted / max(rounds, 1)
            ppa = [_r(a / t, 4) if t else None for a, t in zip(acc_at, att_at)]
            t_draft = summarize(per_run(rows, "draft"))["median"]
            t_verify = summarize(per_run(rows, "verify"))["median"]
            t_accept = summarize(per_run(rows, "accept"))["median"]
            ideal = al * t_step / (t_draft + t_verify) if t_step and t_draft is not None and t_verify else None
            dtps = decode_tps(rows)
            dsp = dtps / plain_decode_tps if dtps and plain_decode_tps else None
            row |= {"acceptance_length": _r(al, 4), "per_position_acceptance": ppa, "rounds": rounds,
                    "t_step_ms": _r(t_step * 1e3, 3) if t_step else None,
                    "t_draft_round_ms": _r(t_draft * 1e3, 3), "t_verify_round_ms": _r(t_verify * 1e3, 3),
                    "decode_speedup": _r(dsp, 4), "ideal_speedup": _r(ideal, 4),
                    "efficiency": _r(dsp / ideal, 4) if ideal and dsp else None}
            # where a round's time goes (medians over prompts of per-run means per round)
            over = []
            for x in rows:
                st = x["stats"]["time_s"]
                timed = sum(v for kk, v in st.items() if kk not in ("total", "prefill"))
                if x["rounds"]:
                    over.append((x["seconds"] - st.get("prefill", 0.0) - timed) / x["rounds"])
            prof = {"method": m.name, "family": m.family, "k": m.k,
                    "draft_ms": _r(t_draft * 1e3, 3), "verify_ms": _r(t_verify * 1e3, 3),
                    "accept_rollback_ms": _r(t_accept * 1e3, 3),
                    "python_overhead_ms": _r(summarize(over)["median"] * 1e3, 3)}
            total = sum(v for kk, v in prof.items() if kk.endswith("_ms") and v is not None)
            prof["round_ms"] = _r(total, 3)
            prof |= {f"{kk[:-3]}_share": _r(prof[kk] / total, 4) for kk in
                     ("draft_ms", "verify_ms", "accept_rollback_ms", "python_overhead_ms") if total}
            prof["prefill_ms_median"] = _r(summarize([x["stats"]["time_s"].get("prefill") for x in rows])["median"]
                                           * 1e3, 3)
            profile.append(prof)
        else:
            rounds = [x["rounds"] for x in rows if x["rounds"]]
            if rounds and m.family != "plain":  # tokens per target forward after the prefill
                al = (toks - len(rows)) / sum(rounds)
                row |= {"acceptance_length": _r(al, 4), "per_position_acceptance": None, "rounds": sum(rounds)}
            else:
                row |= {"acceptance_length": 1.0, "per_position_acceptance": None,
                        "rounds": sum(rounds) if rounds else None}
            if m.family == "plain":
                row["t_step_ms"] = _r(t_step * 1e3, 3) if t_step else None
                row["decode_speedup"] = 1.0 if plain_decode_tps else None
        summary.append(row)
    hf = next((r for r in summary if r["family"] == "hf-greedy"), None)
    for row in summary:
        row["speedup_vs_hf_greedy"] = _r(row["tokens_per_s"] / hf["tokens_per_s"], 4) if hf else None
    return summary, profile


# ============================================================================================ run it all
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
    base = QUICK if quick else FULL

    def knob(v, key):
        return list(v) if isinstance(v, (list, tuple, range)) else (v if v is not None else base[key])

    if out_dir is not None:
        check_results_dir(out_dir, next(model.parameters()).device, next(model.parameters()).dtype, overwrite)
    res = {}
    if drafting:
        res["drafting_cost"] = drafting_cost(parallel_head, model, tokenizer=tokenizer, ks=knob(draft_ks, "draft_ks"),
                                             repeats=knob(draft_repeats, "draft_repeats"), progress=progress)
        res["fastpath_ab"] = fastpath_ab(parallel_head, model, tokenizer=tokenizer,
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


def check_results_dir(out_dir, device, dtype, overwrite: bool = False) -> None:
    """Refuse to write into a results folder that holds another host's or another dtype's results (or, without
    ``overwrite``, any earlier results): each host keeps its own ``data/results/<host-slug>/``."""
    from .precision import dtype_name, host_slug

    index = Path(out_dir) / "bench.json"
    if not index.exists():
        return
    try:
        env = json.loads(index.read_text()).get("env") or {}
    except ValueError:
        env = {}
    mine, theirs = host_slug(device), env.get("host")
    if theirs and theirs != mine:
        raise PeagleError(f"{out_dir} holds results of host {theirs}, this is {mine}: results of one host never "
                          f"overwrite another's. Fix: --out data/results/{mine}/{dtype_name(dtype)}.")
    if env.get("dtype") and env["dtype"] != dtype_name(dtype):
        raise PeagleError(f"{out_dir} holds {env['dtype']} results; this run is {dtype_name(dtype)}. Fix: write "
                          f"to a folder of its own, e.g. data/results/{mine}/{dtype_name(dtype)}.")
    if not overwrite:
        raise PeagleError(f"{out_dir} already holds benchmark results. Fix: --overwrite to replace them, or "
                          "another --out.")


# ============================================================================================ CLI
def _parse_ks(text: str) -> list[int]:
    """``"1-8"``, ``"1,2,4"`` or ``"1-3,6"`` -> sorted unique ints."""
    out = set()
    try:
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                a, b = part.split("-", 1)
                out.update(range(int(a), int(b) + 1))
            else:
                out.add(int(part))
    except ValueError as exc:
        raise PeagleError(f"Cannot read K list {text!r}: use e.g. '1-8' or '1,2,4'.") from exc
    if not out or min(out) < 1:
        raise PeagleError(f"K list {text!r} must hold integers >= 1.")
    return sorted(out)


def register_cli(sub):
    from .cli import add_target_options

    p = sub.add_parser("bench", help="benchmark drafting cost and end-to-end speed-ups (JSON, CSV, PNG)",
                       description="Drafting cost (parallel vs sequential per K) and end-to-end greedy decoding on "
                                   "HumanEval prompts: plain, P-EAGLE, EAGLE-3, transformers greedy and prompt-lookup.")
    p.add_argument("--parallel-head", default="parallel",
                   help="P-EAGLE head: 'parallel' (shipped), a directory, or 'fresh' (untrained, for timing only)")
    p.add_argument("--sequential-head", default="sequential",
                   help="EAGLE-3 head: 'sequential' (shipped), a directory, 'fresh', or 'none'")
    p.add_argument("--allow-fresh", action="store_true",
                   help="use an untrained head when a shipped one is missing (otherwise that is an error)")
    p.add_argument("--ks-parallel", type=_parse_ks, default=None, help="K sweep for P-EAGLE (full: 1-8)")
    p.add_argument("--ks-sequential", type=_parse_ks, default=None, help="K sweep for EAGLE-3 (full: 1-5)")
    p.add_argument("--draft-ks", type=_parse_ks, default=None, help="K values for the drafting cost (full: 1-10)")
    p.add_argument("--pld-ks", type=_parse_ks, default=None, help="prompt_lookup_num_tokens values (default: 10)")
    p.add_argument("-n", "--n-prompts", type=int, default=None, help="HumanEval prompts (full: 8)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="new tokens per prompt (full: 96)")
    p.add_argument("--repeats", type=int, default=None, help="passes over the prompts end to end (default 1)")
    p.add_argument("--draft-repeats", type=int, default=None, help="timed repeats per K for drafting cost (full: 15)")
    p.add_argument("--quick", "--ci", action="store_true", dest="quick", help="CI sizes (2 prompts, 24 tokens, few K)")
    p.add_argument("--skip-drafting", action="store_true", help="no drafting-cost sweep")
    p.add_argument("--skip-e2e", action="store_true", help="no end-to-end sweep")
    p.add_argument("--assistant", default=None,
                   help="small draft LM (HF id/path) for transformers' assisted generation")
    add_target_options(p)
    p.add_argument("--out", default=None, help="results folder (default results/bench/<name>)")
    p.add_argument("--name", default=None, help="run name under results/bench/ (default: target-date-time)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--overwrite", action="store_true", help="replace the results already in --out")
    p.set_defaults(func=run_cli)


def run_cli(args):
    import shlex
    import sys

    from .cli import load_cli_target
    from .models import target_name
    from .settings import results_dir, seed_everything

    seed_everything(0)
    t0 = time.perf_counter()

    def progress(msg):
        print(f"[bench {time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    from .settings import is_ci

    args.quick = args.quick or is_ci()
    model, tok, _ = load_cli_target(args)
    heads = {}
    for role, spec in (("parallel", args.parallel_head), ("sequential", args.sequential_head)):
        if spec == "none":
            heads[role] = None
            continue
        head, desc = load_head_or_fresh(spec, model, mode=role, tokenizer=tok)
        if desc["source"].startswith("fresh") and spec != "fresh" and not args.allow_fresh:
            raise PeagleError(f"No {role} head: {desc['source']}. Fix: pass --{role}-head DIR, train one "
                              "(`peagle-lab train`), or add --allow-fresh to time an untrained head.")
        head._bench_source = desc["source"]
        heads[role] = head
        run_dtype = str(next(head.parameters()).dtype).replace("torch.", "")
        stored = getattr(head, "stored_dtype", run_dtype)
        progress(f"{role} head: {desc['source']} ({desc['num_hidden_layers']} layer(s), trained K={desc['trained_k']}"
                 + (f"; stored in {stored}, converted to {run_dtype})" if stored != run_dtype else ")"))
    if heads["parallel"] is None:
        raise PeagleError("The benchmark needs a parallel head (--parallel-head); 'none' is only for the "
                          "sequential one.")
    assistant = None
    if args.assistant:
        from transformers import AutoModelForCausalLM

        assistant = AutoModelForCausalLM.from_pretrained(args.assistant, dtype=next(model.parameters()).dtype)
        assistant.to(next(model.parameters()).device).eval()
    name = args.name or f"{Path(str(args.target or target_name())).name}-{datetime.now():%Y%m%d-%H%M%S}"
    out_dir = Path(args.out) if args.out else results_dir() / "bench" / name
    res = run_benchmark(model, tok, heads["parallel"], heads["sequential"], out_dir=out_dir,
                        ks_parallel=args.ks_parallel, ks_sequential=args.ks_sequential, draft_ks=args.draft_ks,
                        n_prompts=args.n_prompts, max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                        draft_repeats=args.draft_repeats, pld_ks=args.pld_ks, quick=args.quick,
                        drafting=not args.skip_drafting, e2e=not args.skip_e2e, assistant=assistant,
                        plots=not args.no_plots, progress=progress, overwrite=args.overwrite,
                        command="peagle-lab bench " + " ".join(shlex.quote(a) for a in sys.argv[2:])
                        if len(sys.argv) > 1 and sys.argv[1] == "bench" else None)
    env = (res.get("end_to_end") or res.get("drafting_cost"))["env"]
    print(f"hardware: {env['hardware']}; load {env['loadavg_start']} -> {env['loadavg_end']}")
    if res.get("drafting_cost"):
        print(format_table(res["drafting_cost"]["rows"], ["k", "parallel_ms", "sequential_ms", "ratio_seq_over_par",
                                                          "verify_ms", "verify_ratio"]))
        print(format_table(res["fastpath_ab"]["rows"], ["case", "before_ms", "after_ms", "speedup"]))
    if res.get("end_to_end"):
        e = res["end_to_end"]
        print(format_table(e["methods"], ["method", "tokens_per_s", "speedup", "acceptance_length", "decode_speedup",
                                          "ideal_speedup", "efficiency", "lossless_note"]))
        for note in e["notes"]:
            print("NOTE:", note)
    print(f"results: {out_dir} ({time.perf_counter() - t0:.0f} s)")
    if res.get("end_to_end") and not res["end_to_end"]["all_lossless"]:
        return 2
    return 0
