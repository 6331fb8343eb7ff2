"""What a measurement runs on: the prompts (HumanEval by default, as token ids), the target runner, and the
heads (shipped, given, or freshly initialised for timing only) with the description every result records."""

from __future__ import annotations

import torch

from ..errors import PeagleError
from ..prompts import chat_ids, humaneval_prompts
from ..decoding.target_runner import TargetRunner
from ..drafter.heads import head_description, head_for_target


def model_of(runner_or_model):
    """The model of a ``TargetRunner``, or the model itself."""
    return runner_or_model.model if isinstance(runner_or_model, TargetRunner) else runner_or_model


def target_runner(model, head):
    """A ``TargetRunner`` on ``model`` that taps the layers ``head`` was trained on."""
    return TargetRunner(model, head.config.aux_hidden_state_layer_ids)


def default_prompt_ids(tokenizer, n: int = 1) -> list[list[int]]:
    """The first ``n`` HumanEval prompts in the chat template, as token ids."""
    if tokenizer is None:
        raise PeagleError("No prompts given and no tokenizer to build HumanEval prompts with. "
                          "Fix: pass tokenizer=... or prompts=[[token ids], ...].")
    return [chat_ids(tokenizer, text) for text in humaneval_prompts(n)]


def as_prompt_ids(prompts, tokenizer) -> list[list[int]]:
    """Text prompts (chat template) or token id sequences, as lists of ints of at least 3 tokens each."""
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


def describe_head(head):
    """:func:`head_description` of a head given to a measurement (None for no head)."""
    return None if head is None else head_description(head, getattr(head, "_bench_source", "given"))


def load_head_or_fresh(kind_or_path, model, mode: str | None = None, tokenizer=None, allow_fresh: bool = True):
    """``(head, description)``: :func:`peagle_lab.drafter.heads.head_for_target` (the shipped head when it fits
    the target, else the one trained here for it, else, with ``allow_fresh``, a freshly initialised untrained one).

    ``kind_or_path``: ``'parallel'`` / ``'sequential'``, a directory, or ``'fresh'``. ``tokenizer`` picks a fresh
    head's mask token (default: the tokenizer saved beside the model).
    """
    return head_for_target(kind_or_path, model, tokenizer=tokenizer, mode=mode, allow_fresh=allow_fresh)
