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
from .inputs import as_prompt_ids, describe_head
from .lossless import lossless_note, regime_label
from .methods import Method, head_method, hf_method, plain_method, rounds_of
from .oracle import ORACLE_LABEL, oracle_method, oracle_rates
from .suites import DEFAULT_SUITE, suite_prompts
from ..environment import environment
from .record import SCHEMA, finish_environment, rounded
from .summary import aggregate

ASSISTED_NOT_RUN = ("not run: transformers' assisted generation needs a small draft LM that shares the target's "
                    "tokenizer, and none is available offline here (SmolLM2-135M is the smallest SmolLM2). "
                    "Pass one with `peagle-lab bench --assistant PATH`.")


@torch.no_grad()
def end_to_end(model, tokenizer=None, *, parallel_head=None, sequential_head=None,
               parallel_ks: Sequence[int] = (1, 2, 4, 8), sequential_ks: Sequence[int] = (1, 2, 3, 4, 5),
               prompts=None, n_prompts: int = 8, max_new_tokens: int = 96, pld_ks: Sequence[int] = (10,),
               hf_greedy: bool = True, assistant=None, repeats: int = 1, warmup: bool = True,
               extra_methods: Sequence[Method] = (), eos_id=None, suite: str = DEFAULT_SUITE,
               oracle_ks: Sequence[int] = (), oracle_accept="paper",
               progress: Callable[[str], None] | None = None) -> dict:
    """End-to-end greedy decoding at batch 1 on the first ``n_prompts`` of ``suite`` (or the given ``prompts``),
    all methods interleaved per prompt.

    Methods: plain KV-cached greedy (``speculative.plain_generate``, the baseline), P-EAGLE (``parallel_head``
    in parallel mode) for each K in ``parallel_ks``, EAGLE-3 (``sequential_head`` in sequential mode) for each K
    in ``sequential_ks``, transformers' ``generate`` greedy and prompt-lookup decoding (``pld_ks``), and
    assisted generation when an ``assistant`` model is given, and the rated oracle
    (:mod:`.oracle`) for each K in ``oracle_ks``: the true greedy continuation at the per-position acceptance
    ``oracle_accept`` (``"paper"``: the blog's figure for the suite; a preset; or a list of conditional rates),
    charged ``parallel_head``'s drafting pass. Per method: tokens/s, speed-up vs plain (same
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
        prompt_ids, prompt_names = as_prompt_ids(prompts, tokenizer), None
    else:
        prompt_ids, prompt_names = suite_prompts(tokenizer, suite, n_prompts)
    if not prompt_ids:
        raise PeagleError("No prompts to measure (0 prompts). Fix: -n/--n-prompts 1 or more, or pass prompts.")
    rates, rates_source = (oracle_rates(oracle_accept, suite) if isinstance(oracle_accept, str)
                           else (list(oracle_accept), "given rates")) if oracle_ks else (None, None)
    if max_new_tokens < 1 or repeats < 1:
        raise PeagleError(f"max_new_tokens and repeats must be >= 1, got {max_new_tokens!r} and {repeats!r}. Fix: "
                          "--max-new-tokens 96 --repeats 1 (or any values >= 1).")

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
    if oracle_ks:
        label = ORACLE_LABEL if oracle_accept == "paper" else f"acceptance {oracle_accept}"
        methods += [oracle_method(runner_for(parallel_head), parallel_head, rates, int(k), eos_id, label=label,
                                  source=rates_source) for k in oracle_ks]
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
                rounds = rounds_of(run)
                tokens = len(run.tokens)
                div = first_divergence(run.tokens, base.result, dtype, device) if m.name != "plain" else None
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

    regime = lossless_regime(dtype, device)
    summary, profile = aggregate(methods, runs, regime)
    lossless = {row["method"]: row["lossless"] for row in summary}
    for row in summary:
        rows = [x for x in runs if x["method"] == row["method"]]
        divs = [x["divergence"] for x in rows if x["divergence"] is not None]
        row["lossless_regime"] = regime
        row["divergences"] = len(divs)
        row["max_divergence_margin"] = rounded(max(d["margin"] for d in divs), 5) if divs else None
        row["lossless_note"] = lossless_note(regime, len(rows), divs, regime_label(dtype, device))
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
                   "warmup": warmup, "greedy": True, "batch_size": 1, "suite": suite,
                   "prompts": {"code": "HumanEval", "chat": "held-out split of the prompt mix"}.get(suite, suite)
                   if prompts is None else "given", "prompt_names": prompt_names,
                   "prompt_tokens": [len(p) for p in prompt_ids],
                   "parallel_ks": list(parallel_ks) if parallel_head is not None else [],
                   "sequential_ks": list(sequential_ks) if sequential_head is not None else [],
                   "pld_ks": list(pld_ks), "methods": names,
                   "oracle_ks": list(oracle_ks), "oracle_rates": rates, "oracle_rates_source": rates_source,
                   "parallel_head": describe_head(parallel_head), "sequential_head": describe_head(sequential_head),
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
