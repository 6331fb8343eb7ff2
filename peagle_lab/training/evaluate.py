"""Evaluation of a trained head: acceptance per K by greedy speculative decoding, checked lossless against plain
greedy decoding."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from tqdm.auto import tqdm

from ..decoding.divergence import first_divergence, is_lossless, lossless_regime
from ..errors import PeagleError
from ..precision import dtype_name
from ..decoding.draft_sources import HeadDrafter
from ..drafter import PEagleDrafter
from ..prompts import record_messages, template_ids
from ..decoding.speculative import plain_generate, SpecStats, speculative_generate
from ..decoding.target_runner import TargetRunner


class NotLossless(PeagleError):
    """A speculative output diverged from plain greedy decoding where the plain run's margin exceeds the near-tie
    bound: a bug of the loop, not rounding."""


@dataclass(frozen=True)
class EvalSettings:
    """How :func:`evaluate_head` decodes: at every K in ``ks``, ``max_new_tokens`` per prompt, the head drafting in
    ``mode`` (default: its own), prompts laid out by ``template`` (:func:`peagle_lab.prompts.template_ids`;
    ``"chat"``, the one heads are trained with, unless measuring a mismatch); ``check_lossless``: compare every
    output with plain greedy decoding."""

    ks: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    max_new_tokens: int = 128
    mode: str | None = None
    template: str = "chat"
    check_lossless: bool = True


def _plain_run(runner, ids, key: tuple, reference: dict | None, eos):
    """The plain greedy run of ``ids`` (``key``: its text, history, length and template), kept in ``reference``."""
    if reference is not None and key in reference:
        return reference[key]
    plain = plain_generate(runner, ids, key[2], eos_ids=eos)
    if reference is not None:
        reference[key] = plain
    return plain


def evaluate_head(model, tokenizer, head: PEagleDrafter, prompts: list[str], settings: EvalSettings | None = None,
                  reference: dict | None = None, progress: bool = True) -> dict:
    """Greedy speculative decoding of ``prompts`` (texts or prompt records, chat template) at every K in
    ``settings.ks`` (:class:`EvalSettings`; its defaults when ``None``); checks every output against plain greedy
    decoding: identical in float32 on a CPU; in bfloat16 / float16, and in float32 on a GPU, identical or diverging
    only at a near-tie (``divergence.tie_bound``; each divergence is reported with its logit margin). A divergence
    that ``divergence.lossless_verdict`` refuses raises :class:`NotLossless` with the numbers. Returns acceptance
    length per K (pooled over prompts: 1 + accepted / rounds), per-position acceptance
    ``P(slot j accepted | slots < j accepted)`` and, per K, each prompt's ``[rounds, accepted drafts]``
    (``per_prompt``, in the prompts' order).

    ``reference``: a dict reused across calls to keep the plain greedy outputs (one target pass per prompt
    instead of one per prompt and head)."""
    s = settings or EvalSettings()
    ks, max_new_tokens, template, check_lossless = s.ks, s.max_new_tokens, s.template, s.check_lossless
    runner = TargetRunner(model, head.config.aux_hidden_state_layer_ids)
    drafter = HeadDrafter(head, s.mode)
    eos = tokenizer.eos_token_id
    per_k = {k: SpecStats(k=k) for k in ks}
    times = {k: 0.0 for k in ks}
    tokens, divergences = 0, []
    per_prompt = {k: [] for k in ks}  # per K, one [rounds, accepted drafts] per prompt
    param = next(model.parameters())
    dtype, device = param.dtype, param.device
    regime = lossless_regime(dtype, device)
    bar = tqdm(total=len(prompts) * (len(ks) + 1), desc=f"eval {drafter.mode}", disable=not progress)
    for item in prompts:  # a prompt text, or a prompt record (with a multi-turn history)
        text, history = record_messages(item)
        ids = template_ids(tokenizer, text, template, history)
        plain = _plain_run(runner, ids, (text, json.dumps(history), max_new_tokens, template), reference, eos)
        base = plain.tokens
        tokens += len(base)
        bar.update(1)
        for k in ks:
            res = speculative_generate(runner, drafter, ids, k, max_new_tokens, eos_ids=eos)
            if check_lossless and res.tokens != base:
                div = first_divergence(res.tokens, plain, dtype, device)
                if not is_lossless([div], regime):
                    raise NotLossless(div.message(f" at K={k} ({dtype_name(dtype)} on {device.type}) for prompt "
                                                  f"{text[:60]!r}") + ". Fix: report it with this line; "
                                      "`peagle-lab generate --check --dtype float32 --device cpu` reproduces a loop bug")
                divergences.append(dict(k=k, prompt=text[:60], **div.as_dict()))
            per_k[k] = per_k[k].merge(res.stats)
            per_prompt[k].append([res.stats.rounds, sum(res.stats.accepted)])
            times[k] += res.seconds
            bar.update(1)
    bar.close()
    return dict(
        mode=drafter.mode, prompts=len(prompts), max_new_tokens=max_new_tokens, new_tokens=tokens,
        lossless=(True if regime == "exact" else "near-tie") if check_lossless else None,
        divergences=divergences,
        acceptance_length={k: round(per_k[k].acceptance_length, 4) for k in ks},
        # None: slot never reached (every earlier slot was rejected first)
        per_position_acceptance={k: [None if math.isnan(x) else round(x, 4) for x in per_k[k].conditional_acceptance]
                                 for k in ks},
        rounds={k: per_k[k].rounds for k in ks},
        attempted={k: list(per_k[k].attempted_at) for k in ks},  # per slot: the rounds that reached it
        per_prompt=per_prompt,
        seconds={k: round(times[k], 2) for k in ks},
    )

