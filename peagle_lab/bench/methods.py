"""The decoding methods of the end-to-end sweep, each a :class:`Method` whose ``run(prompt_ids, max_new_tokens)``
gives a :class:`MethodRun`: plain KV-cached greedy (the baseline), a head in parallel (P-EAGLE) or sequential
(EAGLE-3) mode, and transformers' ``generate`` (greedy, prompt-lookup, assisted)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..decoding.draft_sources import HeadDrafter
from ..decoding.speculative import plain_generate, speculative_generate
from ..timer import Timer


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
    def run(prompt, max_new):
        res = plain_generate(runner, prompt, max_new, eos_ids=eos_id)
        return MethodRun(res.tokens, res.seconds, res.stats.as_dict(), res.stats.target_forwards, result=res)

    return Method("plain", "plain", None, run, reference="plain")


def spec_stats_dict(stats) -> dict:
    """``SpecStats.as_dict()`` plus the raw counts the aggregation sums over prompts."""
    return stats.as_dict() | {"accepted_total": int(sum(stats.accepted)), "accepted_at": list(stats.accepted_at),
                              "attempted_at": list(stats.attempted_at)}


def head_method(runner, head, mode: str, k: int, family: str, eos_id=None) -> Method:
    drafter = HeadDrafter(head, mode)

    def run(prompt, max_new):
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
        counter, timer = _ForwardCounter(model), Timer(device)
        try:
            with timer("generate"):
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, **kwargs)
        finally:
            counter.close()
        return MethodRun(out[0, len(prompt):].tolist(), timer.totals["generate"], None, counter.n)

    return Method(name, family, k, run, reference="plain" if family == "hf-greedy" else "hf-greedy")


def rounds_of(run: MethodRun) -> int | None:
    if run.stats and run.stats.get("rounds") is not None and run.stats.get("k"):
        return run.stats["rounds"]
    if run.target_forwards:
        return max(run.target_forwards - 1, 0)  # one prefill, then one forward per round/step
    return None
