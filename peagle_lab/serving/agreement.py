"""Does vLLM decode the same with a P-EAGLE head as without it? Token for token, or apart only at near-ties of its
own plain run, by the one lossless rule (:mod:`peagle_lab.decoding.divergence`).

vLLM's verify pass over K+1 tokens and its one-token decode are other programs (its attention, MoE and attention-sink
kernels block the sums differently), so even in float32 on a CPU the two may pick different tokens where the plain
run's top-2 logits nearly tie: float32 is held to the bound of float32 with other kernels. The margin at a divergence
is the plain engine's own top-1 minus top-2 logit there: the plain engine runs with ``PLAIN_ENGINE_ARGS`` (vLLM
returns raw logits in place of log-probabilities) and its prompts with ``logprobs=SCORED_LOGPROBS``.
"""

from __future__ import annotations

from ..decoding.divergence import agreement
from ..decoding.speculative import GenerationResult
from ..errors import PeagleError

PLAIN_ENGINE_ARGS = {"logprobs_mode": "raw_logits"}  # vllm.LLM keyword: what SamplingParams(logprobs=n) returns
SCORED_LOGPROBS = 2  # the top-2 logits of every generated position: the margin and the top logit


def _value(entry) -> float:
    return float(getattr(entry, "logprob", entry))


def plain_run(token_ids, position_logits) -> GenerationResult:
    """One greedy output of the plain engine as a plain run with its margins: ``position_logits`` holds, per
    generated token, a mapping of token id to its raw logit (vLLM's ``Logprob`` objects or floats), the top 2 at
    least."""
    token_ids = list(token_ids)
    if position_logits is None or len(position_logits) != len(token_ids):
        raise PeagleError("The plain vLLM run has no top-2 logits for every token. Fix: start its engine with "
                          f"{PLAIN_ENGINE_ARGS} and generate with SamplingParams(logprobs={SCORED_LOGPROBS}).")
    margins, tops = [], []
    for i, scores in enumerate(position_logits):
        values = sorted((_value(v) for v in scores.values()), reverse=True)
        if len(values) < 2:
            raise PeagleError(f"The plain vLLM run has fewer than 2 logits at token {i}. Fix: generate with "
                              f"SamplingParams(logprobs={SCORED_LOGPROBS}).")
        margins.append(values[0] - values[1])
        tops.append(values[0])
    return GenerationResult(token_ids, None, 0.0, margins=margins, top_logits=tops)


def plain_runs(outputs) -> list[GenerationResult]:
    """:func:`plain_run` of each of vLLM's ``RequestOutput``s (its first completion)."""
    return [plain_run(o.outputs[0].token_ids, o.outputs[0].logprobs) for o in outputs]


def speculation_agreement(with_head, plains, dtype) -> dict:
    """vLLM's greedy tokens with the head (one token list per prompt) against its plain runs (:func:`plain_runs`),
    by :func:`~peagle_lab.decoding.divergence.agreement` with other kernels on the two paths: ``identical``,
    ``near_ties_only`` (every first divergence at a plain-run margin within the bound of ``dtype``), the divergences
    with their margins, and a one-line ``note``."""
    return agreement([list(map(list, with_head)), [p.tokens for p in plains]], plains, dtype, "cpu",
                     same_kernels=False)
