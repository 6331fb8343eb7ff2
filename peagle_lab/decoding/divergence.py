"""Lossless checks: where a speculative output first differs from plain greedy decoding, and whether that is a
near-tie of the plain run (bf16 rounding) or a bug.

bf16 keeps 8 significant bits: one unit in the last place (ulp) of a logit of size |z| is 2**(floor(log2|z|)-7).
Verifying K+1 tokens in one pass and decoding them one at a time run the same maths through differently blocked
kernels, and every layer rounds its output to bf16, so the two paths' logits differ by a few ulps. Where the
top-2 logits of the plain run are closer than that, the two paths may pick different tokens: a near-tie, not a
bug. BF16_TIE_ULPS is the number of ulps (of the top logit) up to which a divergence counts as a near-tie:
4 ulps = 2**-5 relative: 0.5 logits at |z| = 16..32, 1.0 at |z| = 32..64. (Measured on the embedded target:
divergences sit at margins of 0 or 1 ulp; a wrong acceptance rule diverges at margins of several logits.)
float16 keeps 11 significant bits: the same 4 ulps, of an fp16 logit.

float32 on a CPU: the invariant is exact equality (the bound is 0; the test suite holds it for every K). float32 on a
GPU: cuBLAS picks other kernels (tiling, split-K reductions) for 1 row and for K+1 rows, so the two paths' logits
differ in their last bits and a near-exact tie may flip. There a divergence counts as a near-tie up to
FP32_GPU_TIE_RELATIVE of the top logit (2**-11: 0.016 logits at |z| = 32, far below the margins of several logits at
which a wrong acceptance rule diverges); every divergence is reported with its margin either way. The same holds for
float32 on any device where the two paths are other programs (``same_kernels=False``): vLLM's verify pass over K+1
tokens and its one-token decode (its own attention, MoE and sinks kernels), or vLLM against our loop.

:func:`lossless_verdict` is the one rule every lossless claim (the benchmark, ``generate --check``, head
evaluation, the explorer, the GPU check, engine agreement) is made with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import PeagleError

BF16_TIE_ULPS = 4
FP32_GPU_TIE_RELATIVE = 2.0 ** -11
_SIGNIFICANT_BITS = {torch.bfloat16: 8, torch.float16: 11}


LOSSLESS, NEAR_TIES_ONLY, NOT_LOSSLESS = "lossless", "near-ties only", "not lossless"


def _exact(dtype, device, same_kernels: bool) -> bool:
    return dtype in (torch.float32, torch.float64) and torch.device(device).type == "cpu" and same_kernels


def lossless_regime(dtype, device="cpu", same_kernels: bool = True) -> str:
    """``exact`` (fp32 on a CPU, both paths the same kernels: token for token) or ``near-tie`` (bf16 / fp16, fp32 on
    a GPU, and fp32 wherever ``same_kernels`` is False: divergences only where the plain run's top-2 logits are
    within the bound of :func:`tie_bound`)."""
    return "exact" if _exact(dtype, device, same_kernels) else "near-tie"


def tie_bound(dtype, top_logit: float, device="cpu", same_kernels: bool = True) -> float:
    """The largest plain-run margin a divergence may have and still be a near-tie in ``dtype`` on ``device``:
    0 in float32 on a CPU with the same kernels on both paths (exact equality is the invariant there),
    ``FP32_GPU_TIE_RELATIVE`` of the top logit in float32 on a GPU or with other kernels, ``BF16_TIE_ULPS`` ulps of
    the top logit in bfloat16 / float16."""
    top = max(abs(top_logit), 2.0 ** -8)
    if dtype in (torch.float32, torch.float64):
        return 0.0 if _exact(dtype, device, same_kernels) else FP32_GPU_TIE_RELATIVE * top
    exp = math.floor(math.log2(top))
    return BF16_TIE_ULPS * 2.0 ** (exp - (_SIGNIFICANT_BITS.get(dtype, 8) - 1))


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

    def message(self, where: str = "") -> str:
        """One line: where the outputs first differ, the plain run's margin there and the bound it is held to."""
        verdict = "a near-tie" if self.near_tie else "NOT a near-tie: the loop is not lossless"
        return (f"speculative output differs from plain greedy{where} at token {self.position} (token {self.got} "
                f"vs {self.plain}; plain top-1 minus top-2 logit {self.margin:.3g}, near-tie bound {self.bound:.3g}): "
                f"{verdict}")

    def as_dict(self) -> dict:
        return {"position": self.position, "margin": round(self.margin, 5), "bound": round(self.bound, 5),
                "near_tie": self.near_tie, "token": self.got, "plain_token": self.plain}


def lossless_verdict(divergences, regime: str) -> str:
    """Whether the runs of one method are lossless: ``divergences`` holds, per run, None where its output equals its
    reference, else its first divergence from plain greedy (a :class:`Divergence` or its ``as_dict()``); ``regime``
    is :func:`lossless_regime`'s. ``LOSSLESS``: every output identical; ``NEAR_TIES_ONLY``: in the ``near-tie``
    regime, every divergence at a near-tie of the plain run; ``NOT_LOSSLESS``: any divergence in the ``exact``
    regime, or one that is no near-tie."""
    found = [d for d in divergences if d is not None]
    if not found:
        return LOSSLESS
    near_ties = all(d.near_tie if isinstance(d, Divergence) else d["near_tie"] for d in found)
    return NEAR_TIES_ONLY if regime != "exact" and near_ties else NOT_LOSSLESS


def is_lossless(divergences, regime: str) -> bool:
    """:func:`lossless_verdict` is ``LOSSLESS`` or ``NEAR_TIES_ONLY``."""
    return lossless_verdict(divergences, regime) != NOT_LOSSLESS


def first_divergence(tokens, plain, dtype, device="cpu", same_kernels: bool = True) -> Divergence | None:
    """Where ``tokens`` first differ from the plain greedy run ``plain`` (a ``speculative.GenerationResult``;
    None when identical), with the plain run's logit margin there and the near-tie bound of ``dtype`` on
    ``device`` (:func:`tie_bound`)."""
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
    return Divergence(pos, plain.margins[pos], tie_bound(dtype, top, device, same_kernels), got, ref)


def agreement(output_sets, plains, dtype, device="cpu", same_kernels: bool = True) -> dict:
    """Do several greedy runs of the same prompts agree (vLLM with and without a head, our loop and vLLM)?

    ``output_sets``: one list of token lists per run, prompt by prompt; ``plains``: our plain greedy
    ``GenerationResult`` of each prompt (with its logit margins). ``identical``: every run gives the same tokens
    for every prompt. Otherwise each output is held against our plain run by :func:`lossless_verdict` in the regime
    of ``dtype`` on ``device`` (``same_kernels``: as in :func:`tie_bound`): ``near_ties_only`` when it holds; ``note``
    says it in one line with the largest margin."""
    identical = all(run[i] == output_sets[0][i] for run in output_sets for i in range(len(plains)))
    divs = [d for run in output_sets for toks, plain in zip(run, plains)
            if (d := first_divergence(toks, plain, dtype, device, same_kernels)) is not None]
    ok = is_lossless(divs, lossless_regime(dtype, device, same_kernels))
    if identical:
        note = "identical"
    elif not divs:
        note = "runs differ from each other but none from our plain greedy run (a bug of the comparison)"
        ok = False
    else:
        worst = max(divs, key=lambda d: d.margin)
        note = (f"{'only near-ties' if ok else 'NOT only near-ties'}: {len(divs)} outputs diverge from plain greedy, "
                f"largest margin {worst.margin:.3g} (bound {worst.bound:.3g})")
    return {"identical": identical, "near_ties_only": ok, "divergences": [d.as_dict() for d in divs], "note": note}
