"""One timed greedy batch on vLLM's offline engine, with or without a head: the engine started (its start timed),
warmed up on the first prompt, the batch generated and timed, and the engine freed before the next one asks for
the GPU. A speculating engine reports the spec-decode counters of the timed batch alone; the plain engine scores
the batch once more, untimed, with its top-2 raw logits per token: the margins that
:func:`~peagle_lab.serving.agreement.speculation_agreement` judges a divergence by."""

from __future__ import annotations

import gc

from ..timer import Timer
from .agreement import PLAIN_ENGINE_ARGS, SCORED_LOGPROBS, plain_runs
from .engine import Speculation, make_llm, require_vllm, spec_metrics

WARMUP_TOKENS = 8  # the warm-up generates this many tokens of the first prompt


def timed_greedy_batch(target_dir, prompts, max_tokens: int, spec: Speculation | None = None, dtype=None,
                       max_model_len: int = 2048) -> dict:
    """Greedy outputs of ``prompts`` (vLLM prompts: strings or ``{"prompt_token_ids": [...]}``) on an engine over
    ``target_dir``, speculating as ``spec`` says (plain without it), in ``dtype`` (our own loop's, for comparison).

    Returns ``ids`` and ``text`` (one per prompt), ``start_s`` (engine start) and ``gen_s`` (the timed batch),
    ``metrics`` (:func:`~peagle_lab.serving.engine.spec_metrics` of the timed batch; speculating engines only) and
    ``runs`` (:func:`~peagle_lab.serving.agreement.plain_runs` of the batch scored again; the plain engine only)."""
    sampling = require_vllm().SamplingParams
    greedy = sampling(temperature=0.0, max_tokens=max_tokens)
    timer = Timer("cpu")  # the engine's calls return with their outputs on the host
    with timer("start"):
        llm = make_llm(target_dir, spec, max_model_len=max_model_len, dtype=dtype,
                       **({} if spec else PLAIN_ENGINE_ARGS))
    try:
        llm.generate(prompts[:1], sampling(temperature=0.0, max_tokens=WARMUP_TOKENS), use_tqdm=False)
        before = spec_metrics(llm) if spec else None
        with timer("generate"):
            outs = llm.generate(prompts, greedy, use_tqdm=False)
        metrics = spec_metrics(llm, since=before) if spec else None
        runs = None if spec else plain_runs(llm.generate(
            prompts, sampling(temperature=0.0, max_tokens=max_tokens, logprobs=SCORED_LOGPROBS), use_tqdm=False))
    finally:
        del llm  # the engine and its KV cache go before the caller starts the next one
        gc.collect()
    return {"ids": [list(o.outputs[0].token_ids) for o in outs], "text": [o.outputs[0].text for o in outs],
            "start_s": timer.totals["start"], "gen_s": timer.totals["generate"], "metrics": metrics, "runs": runs}
