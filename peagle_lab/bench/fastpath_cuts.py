"""The fast-path cuts the loop makes, timed before and after on the same prompt (interleaved per repeat): the
target's lm_head over the last prompt position only, the drafter's lm_head over the draft slots only, and (bf16
on a CPU) an fp32 copy of the target's lm_head."""

from __future__ import annotations

from typing import Callable

import torch

from .fastpath import fp32_lm_head, undo_fp32_lm_head
from ..decoding.slots import Slots
from ..decoding.target_runner import TargetRunner
from ..timer import summarize, time_once
from .inputs import as_prompt_ids, default_prompt_ids, model_of, target_runner
from ..environment import environment
from .record import SCHEMA, finish_environment, rounded


@torch.no_grad()
def fastpath_ab(head, runner_or_model, prompt_ids=None, tokenizer=None, k: int = 7, repeats: int = 15,
                progress: Callable[[str], None] | None = None) -> dict:
    """Before/after timings of the cuts the loop makes, interleaved per repeat on the same prompt:

    * ``prefill``: the target's lm_head over every prompt position (before) or the last one only (after);
    * ``draft``: the drafter's lm_head over every slot of a parallel round (before) or the K draft slots only.
    """
    model = model_of(runner_or_model)
    runner = runner_or_model if isinstance(runner_or_model, TargetRunner) else target_runner(model, head)
    device = runner.device
    env = environment(device, next(model.parameters()).dtype)
    prompt = as_prompt_ids([prompt_ids if prompt_ids is not None else default_prompt_ids(tokenizer, 1)[0]],
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
    slots = Slots.after_prefill(prompt, prompt[-1], taps)  # EAGLE shift; prompt[-1] stands in for the first token
    tokens = torch.tensor([slots.tokens + [head.config.mask_token_id] * (k - 1)], device=device)
    hid = torch.cat([hidden, mask], dim=1)
    pos = torch.arange(0, n + k - 1, device=device)[None]

    def draft(logits_from):
        return lambda: head(tokens, hid, pos, cache=head.new_cache(), logits_from=logits_from)

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
        rows.append({"case": c, "what": what[c], "before_ms": rounded(b * 1e3, 3), "after_ms": rounded(a * 1e3, 3),
                     "speedup": rounded(b / a, 3)})
    return {"schema": SCHEMA, "kind": "fastpath_ab", "env": finish_environment(env),
            "config": {"k": k, "repeats": repeats, "prompt_tokens": n}, "rows": rows}
