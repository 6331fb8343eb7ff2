"""The drafter's slots and the EAGLE shift, stated once.

Drafter slot ``t`` holds token ``x[t+1]`` together with the target's tapped hidden states at position ``t`` (the
state that predicted it), at RoPE position ``t``. So after the target's prefill over a prompt ``x[0..n-1]`` that
chose ``first``, the slots are ``x[1..n-1] + [first]`` with taps ``0..n-1``; after a verification round that
committed ``new`` (accepted drafts + the bonus token) from position ``p`` on, the slots are ``new`` with the taps
the verification computed at ``p..p+len(new)-1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import PeagleError


@dataclass(frozen=True)
class Slots:
    """Newly committed drafter slots: ``tokens[i]`` and ``taps[i]`` sit at slot (= position) ``start + i``."""

    tokens: list  # x[t+1] for t = start .. start+n-1
    taps: torch.Tensor  # (n, num_taps * H): the target's taps at t
    start: int = 0

    def __post_init__(self):
        if len(self.tokens) != len(self.taps):
            raise PeagleError(f"{len(self.tokens)} slot tokens but {len(self.taps)} rows of taps: slot t pairs "
                             "token t+1 with the taps at t, one of each per slot")

    @classmethod
    def after_prefill(cls, prompt, first: int, taps: torch.Tensor) -> "Slots":
        """The slots of a prompt the target has just prefilled (``taps``: one row per prompt position), whose
        next token it chose as ``first``: the prompt shifted by one, then ``first``."""
        return cls([int(t) for t in prompt[1:]] + [int(first)], taps, 0)

    @classmethod
    def after_round(cls, new, taps: torch.Tensor, start: int) -> "Slots":
        """The slots a verification round commits: ``new`` (accepted drafts + bonus) with the taps the target
        computed from ``start`` (the position of the last token it had committed before the round) on."""
        return cls([int(t) for t in new], taps[: len(new)], start)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def end(self) -> int:
        """The slot after the last one: where the drafter's first draft slot sits."""
        return self.start + len(self.tokens)

    def tail(self, n: int) -> "Slots":
        """The last ``n`` slots (as if only they were newly committed)."""
        return Slots(self.tokens[len(self) - n:], self.taps[len(self) - n:], self.end - n)
