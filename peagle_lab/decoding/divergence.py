"""Lossless checks: where a speculative output first differs from plain greedy decoding, and whether that is a
near-tie of the plain run (bf16 rounding) or a bug.

bf16 keeps 8 significant bits: one unit in the last place (ulp) of a logit of size |z| is 2**(floor(log2|z|)-7).
Verifying K+1 tokens in one pass and decoding them one at a time run the same maths through differently blocked
kernels, and every layer rounds its output to bf16, so the two paths' logits differ by a few ulps. Where the
top-2 logits of the plain run are closer than that, the two paths may pick different tokens: a near-tie, not a
bug. BF16_TIE_ULPS is the number of ulps (of the top logit) up to which a divergence counts as a near-tie:
4 ulps = 2**-5 relative: 0.5 logits at |z| = 16..32, 1.0 at |z| = 32..64. (Measured on the embedded target:
divergences sit at margins of 0 or 1 ulp; a wrong acceptance rule diverges at margins of several logits.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import PeagleError

BF16_TIE_ULPS = 4


def logit_margin(logits_row: torch.Tensor) -> float:
    """Top-1 minus top-2 logit of one position (in float32)."""
    top = logits_row.float().topk(2).values
    return float(top[0] - top[1])


def tie_bound(dtype, top_logit: float) -> float:
    """The largest plain-run margin a divergence may have and still be a near-tie in ``dtype``: 0 in float32
    (exact equality is the invariant there), ``BF16_TIE_ULPS`` ulps of the top logit in bfloat16."""
    if dtype in (torch.float32, torch.float64):
        return 0.0
    exp = math.floor(math.log2(max(abs(top_logit), 2.0 ** -8)))
    return BF16_TIE_ULPS * 2.0 ** (exp - 7)


@dataclass
class Divergence:
    position: int  # index in the generated tokens where the outputs first differ
    margin: float  # the plain run's top-1 minus top-2 logit there
    bound: float  # tie_bound at that position
    got: int
    plain: int

    @property
    def near_tie(self) -> bool:
        return self.margin <= self.bound

    def as_dict(self) -> dict:
        return {"position": self.position, "margin": round(self.margin, 5), "bound": round(self.bound, 5),
                "near_tie": self.near_tie, "token": self.got, "plain_token": self.plain}


def first_divergence(tokens, plain, dtype) -> Divergence | None:
    """Where ``tokens`` first differ from the plain greedy run ``plain`` (a ``speculative.GenerationResult``;
    None when identical), with the plain run's logit margin there and the near-tie bound of ``dtype``."""
    n = min(len(tokens), len(plain.tokens))
    pos = next((i for i in range(n) if tokens[i] != plain.tokens[i]), None)
    if pos is None:
        if len(tokens) == len(plain.tokens):
            return None
        pos = n
    if plain.margins is None or pos >= len(plain.margins):
        raise PeagleError("The plain run has no logit margins at the divergence: run plain_generate greedily.")
    top = plain.top_logits[pos] if plain.top_logits else 16.0
    got = tokens[pos] if pos < len(tokens) else -1
    ref = plain.tokens[pos] if pos < len(plain.tokens) else -1
    return Divergence(pos, plain.margins[pos], tie_bound(dtype, top), got, ref)
