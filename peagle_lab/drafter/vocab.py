"""Draft vocabulary: the ``Vd`` target ids the drafter's ``lm_head`` can emit, chosen by token frequency.

A drafter only has to propose tokens the target is likely to produce, so its output layer can be much smaller
than the target's (EAGLE-3, vLLM: ``draft_vocab_size`` rows in ``lm_head``). The checkpoint maps draft ids back
with ``d2t`` (``target_id = draft_id + d2t[draft_id]``) and marks kept target ids in ``t2d`` (bool, vocab).

Count the tokens the drafter will be trained to predict (the target's own responses), keep the ``size`` most
frequent ids plus a few that must always be there (the mask token, EOS), sort them: that is the draft vocabulary.
:func:`coverage` says which fraction of token occurrences it can still produce; a draft that needs a token
outside it is simply wrong (lossless anyway: the target verifies every draft).
"""

from __future__ import annotations

from typing import Iterable

import torch

from ..errors import PeagleError


def pick_mask_token_id(tokenizer) -> int:
    """A token that never occurs in chat text: the last added special token that is not BOS/EOS/PAD/UNK and does
    not appear in the chat template (SmolLM2: 16, ``<empty_output>``)."""
    used = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}
    template = getattr(tokenizer, "chat_template", None) or ""
    candidates = []
    for tid, tok in sorted(getattr(tokenizer, "added_tokens_decoder", {}).items()):
        text = getattr(tok, "content", str(tok))
        if tid not in used and text not in template:
            candidates.append(tid)
    if not candidates:
        raise PeagleError("No unused special token to serve as the mask token. Fix: pass mask_token_id=<id> of a "
                          "token that does not occur in your data (or add one to the tokenizer).")
    return int(candidates[-1])


def mask_token_id_for(model, tokenizer=None, untrained: bool = False) -> int:
    """The mask token of a new head for ``model``: :func:`pick_mask_token_id` of ``tokenizer``, or (none given)
    of the tokenizer saved beside the model (its ``name_or_path`` directory, e.g. the embedded target's).

    ``untrained=True`` (a fresh head that is only timed or shown, never trained): when the tokenizer has no unused
    special token, the first embedding row no token of the tokenizer maps to, else (with a warning) the last id --
    any id keeps decoding lossless, only training needs one that never occurs in text."""
    if tokenizer is None:
        source = getattr(model, "name_or_path", "") or getattr(getattr(model, "config", None), "_name_or_path", "")
        if not source:
            raise PeagleError("No tokenizer to pick the mask token from: the model has no name_or_path. Fix: pass "
                              "tokenizer=... (or mask_token_id=<an id that never occurs in text>).")
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as exc:
            raise PeagleError(f"No tokenizer to pick the mask token from ({source}: {exc}). Fix: pass "
                              "tokenizer=... (or mask_token_id=<an id that never occurs in text>).") from exc
    try:
        return pick_mask_token_id(tokenizer)
    except PeagleError:
        if not untrained:
            raise
    vocab = model.config.vocab_size
    if len(tokenizer) < vocab:
        return len(tokenizer)
    import warnings

    warnings.warn(f"The tokenizer has no unused special token: this untrained head's mask slots use id {vocab - 1}, "
                  "a token that may occur in text (harmless here; training needs --mask-token-id).", stacklevel=3)
    return vocab - 1


def count_tokens(sequences: Iterable, vocab_size: int) -> torch.Tensor:
    """Occurrences of every id in ``sequences`` (iterables of ids, or one flat tensor): LongTensor (vocab_size,)."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    if torch.is_tensor(sequences):
        sequences = [sequences]
    for seq in sequences:
        ids = torch.as_tensor(seq, dtype=torch.long).reshape(-1)
        if ids.numel() == 0:
            continue
        if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
            raise PeagleError(f"token ids outside [0, {vocab_size}) in the counted data: it was tokenized for another "
                              "model. Fix: count tokens produced by the target's own tokenizer.")
        counts += torch.bincount(ids, minlength=vocab_size)
    return counts


def _as_counts(token_counts_or_ids, vocab_size: int) -> torch.Tensor:
    """A 1-D tensor of length ``vocab_size`` is taken as counts; anything else as token ids (flat or nested).

    (A flat id tensor that happens to have ``vocab_size`` entries would be ambiguous: pass ids as a list of
    sequences.)"""
    x = token_counts_or_ids
    if torch.is_tensor(x) and x.dim() == 1 and x.numel() == vocab_size:
        if (x < 0).any():
            raise PeagleError("token counts must be non-negative.")
        return x.double()
    if torch.is_tensor(x) and x.dim() == 2:
        x = list(x)
    elif not torch.is_tensor(x):
        x = list(x)
        if x and not hasattr(x[0], "__len__"):  # a flat list of ids
            x = [x]
    return count_tokens(x, vocab_size).double()


def check_draft_vocab(size, vocab_size: int, always: Iterable[int] = ()) -> list[int]:
    """A draft vocabulary of ``size`` ids can hold the ``always`` ids (mask token, EOS) and lies within the target's
    ``vocab_size``; returns ``always`` sorted and de-duplicated."""
    always = sorted({int(i) for i in always})
    bad = [i for i in always if not 0 <= i < vocab_size]
    if bad:
        raise PeagleError(f"Token ids {bad} (mask token / EOS) are outside the target's vocabulary [0, {vocab_size}). "
                          "Fix: --mask-token-id with an id of this target's vocabulary.")
    low = max(len(always), 1)
    if not isinstance(size, int) or isinstance(size, bool) or not low <= size <= vocab_size:
        raise PeagleError(f"The draft vocabulary size must be an integer in [{low}, {vocab_size}] (it keeps the mask "
                          f"token and EOS, and the target has {vocab_size} ids), got {size!r}. Fix: "
                          f"--draft-vocab-size in {low}..{vocab_size}, or 0 for the full vocabulary.")
    return always


def build_draft_vocab(token_counts_or_ids, size: int, vocab_size: int, always: Iterable[int] = ()) -> torch.Tensor:
    """The ``size`` most frequent target ids (ties: lower id first) plus ``always``, sorted: LongTensor (size,).

    ``token_counts_or_ids``: counts per id (a 1-D tensor of length ``vocab_size``) or token ids (a list of
    sequences, a 2-D tensor, or a flat list). ``always``: ids kept whatever their count (the mask token, EOS);
    they take places from the least frequent ids. ``size == vocab_size`` gives the full vocabulary.
    """
    always = check_draft_vocab(size, vocab_size, always)
    if size == vocab_size:
        return torch.arange(vocab_size, dtype=torch.long)
    counts = _as_counts(token_counts_or_ids, vocab_size).clone()
    counts[always] = float("inf")
    # stable sort on -count keeps lower ids first among equal counts
    order = torch.sort(-counts, stable=True).indices
    return order[:size].sort().values.long()


def coverage(token_counts_or_ids, draft_ids: torch.Tensor, vocab_size: int) -> float:
    """Fraction of token occurrences whose id is in ``draft_ids`` (1.0 for the full vocabulary)."""
    counts = _as_counts(token_counts_or_ids, vocab_size)
    total = float(counts.sum())
    if total == 0:
        raise PeagleError("no tokens were counted: coverage is undefined. Fix: count a non-empty data set.")
    return float(counts[torch.as_tensor(draft_ids, dtype=torch.long)].sum()) / total


def d2t_t2d(draft_ids: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The checkpoint's maps: ``d2t`` (int64 offsets, target = draft + d2t) and ``t2d`` (bool, vocab_size)."""
    draft_ids = torch.as_tensor(draft_ids, dtype=torch.long)
    if draft_ids.numel() > 1 and not bool((draft_ids[1:] > draft_ids[:-1]).all()):
        raise PeagleError("draft ids must be sorted and unique (build_draft_vocab returns them so).")
    d2t = draft_ids - torch.arange(draft_ids.numel())
    return d2t, _kept(draft_ids, vocab_size)


def unset_maps(draft_vocab_size: int, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``d2t`` and ``t2d`` before a draft vocabulary is set: zero offsets, and every target id kept when the draft
    vocabulary is the whole vocabulary (none otherwise)."""
    d2t = torch.zeros(draft_vocab_size, dtype=torch.long)
    t2d = torch.full((vocab_size,), draft_vocab_size == vocab_size, dtype=torch.bool)
    return d2t, t2d


def _kept(draft_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[draft_ids] = True
    return t2d


def draft_ids_from_d2t(d2t: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`d2t_t2d`: the target id of every draft id (``draft + d2t``), on ``d2t``'s device."""
    return torch.arange(d2t.numel(), device=d2t.device) + d2t


def d2t_in_vocab(d2t: torch.Tensor, vocab_size: int) -> bool:
    """Whether ``d2t`` maps every draft id into the target vocabulary ``[0, vocab_size)`` (a damaged head, or one
    for another target, does not)."""
    ids = draft_ids_from_d2t(d2t)
    return not len(ids) or (int(ids.min()) >= 0 and int(ids.max()) < vocab_size)


def t2d_from_d2t(d2t: torch.Tensor, vocab_size: int, fix: str = "") -> torch.Tensor:
    """The ``t2d`` (bool, vocab_size) of a stored ``d2t``; PeagleError (ending with ``fix``) when it maps outside
    the vocabulary."""
    if not d2t_in_vocab(d2t, vocab_size):
        raise PeagleError(f"d2t maps draft ids outside the target vocabulary (0..{vocab_size - 1}): the head is "
                          f"damaged or belongs to another target. {fix}".rstrip())
    return _kept(draft_ids_from_d2t(d2t), vocab_size)


def target_to_draft_index(draft_ids: torch.Tensor, vocab_size: int, missing: int = -100) -> torch.Tensor:
    """LongTensor (vocab_size,): draft id of every target id, ``missing`` for ids outside the draft vocabulary."""
    draft_ids = torch.as_tensor(draft_ids, dtype=torch.long)
    index = torch.full((vocab_size,), missing, dtype=torch.long, device=draft_ids.device)
    index[draft_ids] = torch.arange(draft_ids.numel(), device=draft_ids.device)
    return index
