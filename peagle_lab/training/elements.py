"""The training elements of a packed row, depth by depth, with COD subsampling of the deeper depths.

The training element ``(a, d)``: anchor ``a`` (a position of a sequence ``x_0..x_{T-1}``), depth ``d``.
``h_t`` are the target's three taps at ``t`` (3H), ``y_t`` the target's greedy label at ``t`` (its prediction for
index ``t+1``). EAGLE shift: drafter slot ``a`` holds token ``x_{a+1}`` and ``fc(h_a)`` at position ``a``.

* depth 0, ``(a, 0)``: token ``x_{a+1}``, hidden ``fc(h_a)``, position ``a``, predicts ``y_{a+1}``;
* depth ``d >= 1``, ``(a, d)``: position ``a+d``, predicts ``y_{a+d+1}`` (exists only when ``a+d+1 < T``);
  - parallel (P-EAGLE): token = the mask token (its learned embedding row), hidden = ``fc(mask_hidden)``;
  - sequential (EAGLE-3 training-time test): token ``x_{a+d+1}``, hidden = the drafter's own prenorm output of
    ``(a, d-1)``, so depth ``d`` is computed after depth ``d-1``.

Several sequences are packed into one row (:mod:`peagle_lab.training.packing`); positions restart per sequence.
COD (:func:`peagle_lab.training.cod.cod_sample`) keeps all anchors at depth 0 and fewer at deeper depths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .cod import cod_sample
from ..errors import PeagleError


@dataclass
class Depth:
    """The elements of one depth in a packed row (``g``: the anchor's index among depth-0 elements)."""

    g: torch.Tensor  # (Q,) anchor index into depth 0
    seq: torch.Tensor  # (Q,) sequence id in the row
    anchor_pos: torch.Tensor  # (Q,) anchor position a (within its sequence)
    pos: torch.Tensor  # (Q,) RoPE position a + d
    flat: torch.Tensor  # (Q,) index of x_{a+d+1} / y_{a+d+1} in the row's flat token arrays
    loss: torch.Tensor  # (Q,) bool: trained (an anchor); depth 0 holds non-anchor context too
    parent: torch.Tensor | None = None  # (Q,) index of (a, d-1) among the previous depth's elements

    def to(self, device) -> "Depth":
        return Depth(*(None if t is None else t.to(device, non_blocking=True)
                       for t in (self.g, self.seq, self.anchor_pos, self.pos, self.flat, self.loss, self.parent)))


@dataclass
class RowPlan:
    x: torch.Tensor  # flat tokens of the row's sequences
    y: torch.Tensor  # flat greedy labels
    taps: torch.Tensor  # (N0, 3H) taps of the depth-0 elements
    depths: list[Depth]
    topk_values: torch.Tensor | None = None  # flat (N, k) target top-k logits beside y (soft targets), or None
    topk_indices: torch.Tensor | None = None  # flat (N, k) their target-vocabulary ids

    def to(self, device) -> "RowPlan":
        """The plan with every tensor on ``device`` (planned on the CPU, copied once per step; the masks and the
        losses are then built on the device without host round trips)."""
        if self.x.device == torch.device(device):
            return self
        return RowPlan(self.x.to(device, non_blocking=True), self.y.to(device, non_blocking=True),
                       self.taps.to(device, non_blocking=True), [d.to(device) for d in self.depths],
                       *(None if t is None else t.to(device, non_blocking=True)
                         for t in (self.topk_values, self.topk_indices)))


def plan_row(row: list[dict], num_depths: int, ratio: float = 0.7, min_ratio: float = 0.2,
             generator: torch.Generator | None = None) -> RowPlan:
    """Elements of a packed row: depth 0 = every position ``t <= T-2`` of every sequence (anchors = response
    positions plus the last prompt position), depth ``d`` = COD-sampled anchors with ``a + d + 1 < T``."""
    xs, ys, taps, seq, pos, flat, end, anchor, tv, ti = [], [], [], [], [], [], [], [], [], []
    off = 0
    for s_id, s in enumerate(row):
        T = len(s["input_ids"])
        if T < 2:
            continue
        t = torch.arange(T - 1)
        xs.append(s["input_ids"])
        ys.append(s["labels"])
        if "topk_values" in s:
            tv.append(s["topk_values"])
            ti.append(s["topk_indices"])
        taps.append(s["taps"][: T - 1])
        seq.append(torch.full((T - 1,), s_id))
        pos.append(t)
        flat.append(off + t + 1)  # where x_{t+1} / y_{t+1} sit in the flat arrays
        end.append(torch.full((T - 1,), off + T))  # one past the sequence's last flat index
        anchor.append(t >= max(s["prompt_len"] - 1, 0))
        off += T
    if not xs:
        raise PeagleError("A packed row has no sequence of 2+ tokens: nothing to train on.")
    seq, pos, flat, end, anchor = (torch.cat(v) for v in (seq, pos, flat, end, anchor))
    depths = [Depth(torch.arange(len(seq)), seq, pos, pos, flat, anchor)]
    anchors = anchor.nonzero().squeeze(1)
    chosen = cod_sample(anchors.numel(), num_depths, ratio, min_ratio, generator)
    for d in range(1, num_depths):
        g = anchors[chosen[d]]
        g = g[flat[g] + d < end[g]]  # y_{a+d+1} must exist
        if g.numel() == 0:
            break
        prev = depths[-1].g
        depths.append(Depth(g, seq[g], pos[g], pos[g] + d, flat[g] + d, torch.ones_like(g, dtype=torch.bool),
                            parent=torch.searchsorted(prev, g)))
    soft = len(tv) == len(xs)  # every sequence of the row carries top-k logits
    return RowPlan(torch.cat(xs), torch.cat(ys), torch.cat(taps), depths,
                   torch.cat(tv) if soft else None, torch.cat(ti) if soft else None)
