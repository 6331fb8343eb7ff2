"""End to end: greedy decoding at batch 1 on one prompt suite (:mod:`.suites`: ``code`` or ``chat``), every
method interleaved per prompt (in a rotating order), every output checked against plain greedy, every speed-up a
ratio to plain decoding measured in the same run."""

from __future__ import annotations

import warnings
from typing import Callable, Sequence

import torch

from ..decoding.divergence import BF16_TIE_ULPS, first_divergence, lossless_regime
from ..errors import PeagleError
from ..decoding.target_runner import TargetRunner
from .config import BenchConfig
from .inputs import as_prompt_ids, describe_head
from .lossless import lossless_note, regime_label
from .methods import Method, head_method, hf_method, plain_method, rounds_of
from .oracle import ORACLE_LABEL, oracle_method, oracle_rates
from .suites import SUITES, suite_prompts
from ..environment import environment
from .record import SCHEMA, finish_environment, rounded
from .summary import aggregate

ASSISTED_NOT_RUN = ("not run: transformers' assisted generation needs a small draft LM that shares the target's "
                    "tokenizer, and none is available offline here (SmolLM2-135M is the smallest SmolLM2). "
                    "Pass one with `peagle-lab bench --assistant PATH`.")
PROMPT_SOURCES = {"code": "HumanEval", "chat": "held-out split of the prompt mix",
                  "offmix": "prompts written apart from the mix (data/prompts/offmix.jsonl)",
                  "lists": "held-out split of the list prompts (data/prompts/lists-val.jsonl)"}


@torch.no_grad()
def end_to_end(model, tokenizer, cfg: BenchConfig, *, parallel_head=None, sequential_head=None, assistant=None,
               extra_methods: Sequence[Method] = (), progress: Callable[[str], None] | None = None) -> dict:
    """End-to-end greedy decoding at batch 1 on the first ``cfg.n_prompts`` of ``cfg.suite`` (one suite; or
    ``cfg.prompts``), all methods interleaved per prompt.

    Methods: plain KV-cached greedy (``speculative.plain_generate``, the baseline), P-EAGLE (``parallel_head``
    in parallel mode) for each K in ``cfg.ks_parallel``, EAGLE-3 (``sequential_head`` in sequential mode) for each
    K in ``cfg.ks_sequential``, transformers' ``generate`` greedy (``cfg.hf_greedy``) and prompt-lookup decoding
    (``cfg.pld_ks``), assisted generation when an ``assistant`` model is given, the rated oracle (:mod:`.oracle`)
    for each K in ``cfg.oracle_ks`` (the true greedy continuation at the per-position acceptance
    ``cfg.oracle_accept``: ``"paper"``, the blog's figure for the suite; a preset; or a list of conditional rates;
    charged ``parallel_head``'s drafting pass, and, with a ``sequential_head``, the same draws charged its K
    passes), then ``extra_methods``. Per method: tokens/s, speed-up vs plain
    (same run), acceptance length, per-position acceptance, ideal speed-up from measured costs, efficiency, and
    the lossless verdict (:func:`peagle_lab.decoding.divergence.lossless_verdict`).

    ``speedup``: end-to-end tokens/s ratio to plain decoding (prefill included: what a user sees).
    ``decode_speedup``: the same after the prefill (our loop's timer splits it off); ``ideal_speedup`` =
    AL * t_step / (t_draft_round + t_verify_round) from the medians of this run models that phase, so
    ``efficiency`` = decode_speedup / ideal_speedup: what acceptance bookkeeping, cache rollback and Python take.
    """
    param = next(model.parameters())
    env = environment(param.device, param.dtype)
    eos_id = tokenizer.eos_token_id if cfg.eos_id is None and tokenizer is not None else cfg.eos_id
    pad_id = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None
    prompt_ids, prompt_names = _prompt_ids(cfg, tokenizer)
    rates, rates_source = ((oracle_rates(cfg.oracle_accept, cfg.suite) if isinstance(cfg.oracle_accept, str)
                            else (list(cfg.oracle_accept), "given rates")) if cfg.oracle_ks else (None, None))
    heads = {"parallel": parallel_head, "sequential": sequential_head}
    methods = (_our_methods(model, cfg, heads, eos_id, rates, rates_source)
               + _transformers_methods(model, cfg, eos_id, pad_id, assistant) + list(extra_methods))
    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise PeagleError(f"Method names must be unique, got {names}.")
    runs = _measure(methods, prompt_ids, cfg, param, progress)
    regime = lossless_regime(param.dtype, param.device)
    summary, profile = aggregate(methods, runs, regime)
    _add_lossless_columns(summary, runs, regime, regime_label(param.dtype, param.device))
    lossless = {row["method"]: row["lossless"] for row in summary}
    return {
        "schema": SCHEMA, "kind": "end_to_end", "env": finish_environment(env),
        "config": _config_record(model, cfg, prompt_ids, prompt_names, names, heads, rates, rates_source),
        "all_lossless": all(v for n, v in lossless.items() if n != "hf-greedy"),
        "lossless": lossless,
        "lossless_regime": regime,
        "bf16_tie_ulps": BF16_TIE_ULPS if regime != "exact" else None,
        "hf_greedy_identical_to_plain": lossless.get("hf-greedy"),
        "assisted_generation": "run" if assistant is not None else ASSISTED_NOT_RUN,
        "methods": summary,
        "round_profile": profile,
        "runs": runs,  # per (repeat, prompt, method); "tokens" kept for the plain baseline only
        "notes": _notes(methods, lossless, regime, heads),
    }


def _prompt_ids(cfg: BenchConfig, tokenizer) -> tuple[list[list[int]], list[str] | None]:
    """``(prompt token ids, prompt names)``: ``cfg.prompts`` (no names), else the first ``cfg.n_prompts`` of
    ``cfg.suite``."""
    if cfg.prompts is not None:
        prompt_ids, prompt_names = as_prompt_ids(cfg.prompts, tokenizer), None
    elif cfg.suite not in SUITES:
        raise PeagleError(f"end_to_end measures one suite, got suite={cfg.suite!r}. Fix: suite= one of "
                          f"{', '.join(SUITES)} (run_benchmark runs each of 'all').")
    else:
        prompt_ids, prompt_names = suite_prompts(tokenizer, cfg.suite, cfg.n_prompts)
    if not prompt_ids:
        raise PeagleError("No prompts to measure (0 prompts). Fix: -n/--n-prompts 1 or more, or pass prompts.")
    return prompt_ids, prompt_names


def _our_methods(model, cfg: BenchConfig, heads: dict, eos_id, rates, rates_source) -> list[Method]:
    """Our speculative loop's methods: plain greedy, P-EAGLE and EAGLE-3 per K, the oracle per K; one
    ``TargetRunner`` per tap set (heads trained on different taps each get theirs)."""
    runners = {}

    def runner_for(head):
        taps = tuple(head.config.aux_hidden_state_layer_ids) if head is not None else None
        if taps not in runners:
            runners[taps] = TargetRunner(model, taps)
        return runners[taps]

    par, seq = heads["parallel"], heads["sequential"]
    methods = [plain_method(runner_for(par or seq), eos_id)]
    if par is not None:
        methods += [head_method(runner_for(par), par, "parallel", k, "p-eagle", eos_id) for k in cfg.ks_parallel]
    if seq is not None:
        methods += [head_method(runner_for(seq), seq, "sequential", k, "eagle3", eos_id) for k in cfg.ks_sequential]
    if cfg.oracle_ks:
        label = ORACLE_LABEL if cfg.oracle_accept == "paper" else f"acceptance {cfg.oracle_accept}"
        methods += [oracle_method(runner_for(par), par, rates, k, eos_id, label=label, source=rates_source)
                    for k in cfg.oracle_ks]
        if seq is not None:  # the same draws charged K sequential passes: only the drafting cost differs
            methods += [oracle_method(runner_for(seq), seq, rates, k, eos_id, label=label, source=rates_source,
                                      mode="sequential") for k in cfg.oracle_ks]
    return methods


def _transformers_methods(model, cfg: BenchConfig, eos_id, pad_id, assistant) -> list[Method]:
    """transformers' greedy ``generate`` (``cfg.hf_greedy``), prompt-lookup per ``cfg.pld_ks``, and assisted
    generation with ``assistant``."""
    methods = [hf_method(model, "hf-greedy", None, eos_id, pad_id)] if cfg.hf_greedy else []
    methods += [hf_method(model, "prompt-lookup", k, eos_id, pad_id) for k in cfg.pld_ks]
    if assistant is not None:
        methods.append(hf_method(model, "assisted", None, eos_id, pad_id, assistant=assistant))
    return methods


def _measure(methods: list[Method], prompt_ids, cfg: BenchConfig, param, progress) -> list[dict]:
    """The per-run rows, one per (repeat, prompt, method): every method on every prompt, in an order that
    rotates per prompt and repeat, after one short untimed run per method with ``cfg.warmup`` (allocations, lazy
    init, caches). ``param``: a parameter of the target (its dtype and device hold the divergences)."""
    if cfg.warmup:
        for m in methods:
            m.run(prompt_ids[0], min(8, cfg.max_new_tokens))
    runs = []
    for r in range(cfg.repeats):
        for i, prompt in enumerate(prompt_ids):
            rot = (r * len(prompt_ids) + i) % len(methods)
            order = methods[rot:] + methods[:rot]
            got = {m.name: m.run(prompt, cfg.max_new_tokens) for m in order}
            # rows in a fixed order; execution order was rotated
            runs += [{"repeat": r, "prompt": i} | _run_row(m, got, order, prompt, param) for m in methods]
            if progress:
                progress(f"end to end: repeat {r + 1}/{cfg.repeats}, prompt {i + 1}/{len(prompt_ids)}")
    return runs


def _run_row(m: Method, got: dict, order: list[Method], prompt, param) -> dict:
    """One method's run on one prompt against plain greedy's (and its reference's) in ``got``."""
    base, run = got["plain"], got[m.name]
    ref = got.get(m.reference, base)
    tokens = len(run.tokens)
    div = first_divergence(run.tokens, base.result, param.dtype, param.device) if m.name != "plain" else None
    return {
        "method": m.name, "family": m.family, "k": m.k,
        "order": order.index(m), "prompt_tokens": len(prompt), "new_tokens": tokens,
        "seconds": run.seconds, "tokens_per_s": tokens / run.seconds if run.seconds > 0 else None,
        "speedup_vs_plain": base.seconds / run.seconds if tokens == len(base.tokens) else
        (tokens / run.seconds) / (len(base.tokens) / base.seconds),
        "identical_to_plain": run.tokens == base.tokens,
        "reference": m.reference if m.reference in got else "plain",
        "identical_to_reference": run.tokens == ref.tokens,
        "divergence": div.as_dict() if div is not None else None,
        "rounds": rounds_of(run),
        "target_forwards": run.target_forwards,
        "stats": run.stats,
        "tokens": run.tokens if m.name == "plain" else None,
    }


def _add_lossless_columns(summary: list[dict], runs: list[dict], regime: str, label: str) -> None:
    """Each summary row's regime, divergence count, largest divergence margin and lossless note (``label``:
    :func:`.lossless.regime_label`)."""
    for row in summary:
        rows = [x for x in runs if x["method"] == row["method"]]
        divs = [x["divergence"] for x in rows if x["divergence"] is not None]
        row["lossless_regime"] = regime
        row["divergences"] = len(divs)
        row["max_divergence_margin"] = rounded(max(d["margin"] for d in divs), 5) if divs else None
        row["lossless_note"] = lossless_note(regime, len(rows), divs, label)


def _notes(methods: list[Method], lossless: dict, regime: str, heads: dict) -> list[str]:
    """What a reader of the results must know: broken losslessness (also a warning), transformers' greedy
    differing from ours, K above the K a head was trained for."""
    notes = []
    bad = [n for n, ok in lossless.items() if not ok and n != "hf-greedy"]
    if bad:
        msg = (f"LOSSLESSNESS BROKEN: {bad} produced output different from greedy decoding (ours, or transformers' "
               "for its own speculative methods)" + (" at a position that is no near-tie" if regime != "exact" else "")
               + ". Their speed-ups are not valid comparisons.")
        notes.append(msg)
        warnings.warn(msg, stacklevel=3)
    if lossless.get("hf-greedy") is False:
        notes.append("transformers' greedy generate differs from our plain greedy loop on some prompt "
                     "(numerics of a different attention/cache path); prompt-lookup / assisted are checked against "
                     "transformers' greedy output, their own baseline.")
    trained_by_family = {"p-eagle": heads["parallel"], "eagle3": heads["sequential"]}
    for m in methods:
        head = trained_by_family.get(m.family)
        trained = head.config.num_speculative_tokens if head is not None else None
        if trained and m.k and m.k > trained:
            notes.append(f"{m.name}: K above the K={trained} the head was trained for.")
    return notes


def _config_record(model, cfg: BenchConfig, prompt_ids, prompt_names, names, heads: dict, rates,
                   rates_source) -> dict:
    """The ``config`` a result records: sizes, suite, prompts, Ks, methods, oracle rates, heads and target."""
    par, seq = heads["parallel"], heads["sequential"]
    return {"n_prompts": len(prompt_ids), "max_new_tokens": cfg.max_new_tokens, "repeats": cfg.repeats,
            "warmup": cfg.warmup, "greedy": True, "batch_size": 1, "suite": cfg.suite,
            "prompts": PROMPT_SOURCES.get(cfg.suite, cfg.suite) if cfg.prompts is None else "given",
            "prompt_names": prompt_names,
            "prompt_tokens": [len(p) for p in prompt_ids],
            "parallel_ks": list(cfg.ks_parallel) if par is not None else [],
            "sequential_ks": list(cfg.ks_sequential) if seq is not None else [],
            "pld_ks": list(cfg.pld_ks), "methods": names,
            "oracle_ks": list(cfg.oracle_ks), "oracle_rates": rates, "oracle_rates_source": rates_source,
            "parallel_head": describe_head(par), "sequential_head": describe_head(seq),
            "target_layers": model.config.num_hidden_layers,
            "target_params": sum(p.numel() for p in model.parameters())}
