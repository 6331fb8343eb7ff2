"""Train P-EAGLE (parallel) and EAGLE-3 (sequential) drafter heads on a frozen target.

The training element ``(a, d)``: anchor ``a`` (a position of a sequence ``x_0..x_{T-1}``), depth ``d``.
``h_t`` are the target's three taps at ``t`` (3H), ``y_t`` the target's greedy label at ``t`` (its prediction for
index ``t+1``). EAGLE shift: drafter slot ``a`` holds token ``x_{a+1}`` and ``fc(h_a)`` at position ``a``.

* depth 0, ``(a, 0)``: token ``x_{a+1}``, hidden ``fc(h_a)``, position ``a``, predicts ``y_{a+1}``;
* depth ``d >= 1``, ``(a, d)``: position ``a+d``, predicts ``y_{a+d+1}`` (exists only when ``a+d+1 < T``);
  - parallel (P-EAGLE): token = the mask token (its learned embedding row), hidden = ``fc(mask_hidden)``;
  - sequential (EAGLE-3 training-time test): token ``x_{a+d+1}``, hidden = the drafter's own prenorm output of
    ``(a, d-1)``, so depth ``d`` is computed after depth ``d-1``.
* attention (both modes): ``(a, d)`` sees the depth-0 elements with anchor ``<= a`` (the context the drafter's
  KV cache holds at inference) and the elements of its own rollout ``(a, d' <= d)`` -- exactly what the one-pass
  parallel draft at inference sees. See :func:`training_mask`.

The elements are computed depth by depth through ONE :class:`~peagle_lab.drafter.DrafterCache` (its ``update``
concatenates the keys/values of earlier depths, gradients flow through them), with an explicit boolean mask per
depth. Several sequences are packed into one row; a block mask keeps them apart and positions restart per
sequence. COD (:func:`peagle_lab.data.cod_sample`) keeps all anchors at depth 0 and fewer at deeper depths.
Loss: cross-entropy of the draft-vocabulary logits against ``y`` mapped into the draft vocabulary (labels outside
it are masked), averaged per depth, every depth weighted equally; per-depth top-1 accuracy is logged (a label
outside the draft vocabulary counts as a miss: that is what acceptance will see).

Trainable: ``fc``, ``mask_hidden`` (variant ``learned``), the decoder layers, ``norm``, ``lm_head`` (started from
the target's), and the mask token's embedding row only (variant ``learned``; every other row stays the target's,
so the checkpoint keeps ``embed_shared_with_target`` and stores one row). The row is its own parameter here
(the same as a gradient hook zeroing the other rows of the embedding, without a dense 49k x H gradient and
optimizer state every step).

Runs on one CPU (fp32) or GPU (optional bf16 autocast), and unchanged under ``accelerate launch`` / ``torchrun``:
with ``accelerate`` installed and a GPU or several processes, :class:`accelerate.Accelerator` places the model and
wraps it in DDP; every process takes its own packed rows.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .atomic import write_json, write_text
from .data import MAX_SEQ_LEN, cod_sample
from .drafter import PEagleConfig, PEagleDrafter
from .errors import PeagleError
# pick_mask_token_id lives in .vocab; notebooks 02 and 03 import it from here, so it stays importable from train
from .vocab import build_draft_vocab, count_tokens, coverage, pick_mask_token_id, target_to_draft_index

MASK_HIDDEN_VARIANTS = ("learned", "zeros", "context", "random")
MASK_EMBEDDING_VARIANTS = ("learned", "frozen")
STATE_FILE = "state.pt"
LOG_FILE = "train_log.jsonl"


# ============================================================================================ configuration
@dataclass
class TrainConfig:
    mode: str = "parallel"  # "parallel" (P-EAGLE) or "sequential" (EAGLE-3 training-time test)
    num_depths: int = 8  # K: depths trained (slot 1 .. K)
    layers: int = 1  # drafter decoder layers
    draft_vocab_size: int | None = 16384  # None: the full target vocabulary
    steps: int = 1000
    time_budget_s: float | None = None  # stop cleanly (and save) when the training loop has run this long
    schedule: str = "steps"  # cosine over "steps", or over "time" (time_budget_s) when the budget decides
    lr: float = 2e-3
    lm_head_lr_ratio: float = 0.25  # lm_head and final norm start from the target's: move them more gently
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    batch_tokens: int = 2048  # sequence tokens per optimizer step (gradient accumulation over packed rows)
    row_tokens: int = 512  # sequence tokens packed into one row (one forward)
    max_seq_len: int = MAX_SEQ_LEN
    cod_ratio: float = 0.7
    cod_min_ratio: float = 0.2
    mask_hidden: str = "learned"
    mask_embedding: str = "learned"
    mask_token_id: int | None = None  # None: picked from the tokenizer (an unused special token)
    tap_layers: tuple[int, ...] | None = None
    seed: int = 0
    log_every: int = 1
    save_every: int = 50  # optimizer steps between checkpoints (also on stop / Ctrl-C)
    autocast: str = "auto"  # "auto": bf16 on CUDA and CPUs with native bf16 (AMX / AVX512-BF16), else float32
    freeze_lm_head: bool = False  # keep lm_head and the final norm at the target's (speculators' choice)
    init_from: str | None = None  # a head directory to continue from (its draft vocabulary and mask token)
    snapshot_every_tokens: int | None = None  # save a head copy every N training tokens (the learning curve)
    accelerate: str = "auto"  # "auto": use accelerate's Accelerator on GPU / several processes; "no": never
    target: str = ""

    def __post_init__(self):
        if self.mode not in ("parallel", "sequential"):
            raise PeagleError(f"mode must be 'parallel' or 'sequential', got {self.mode!r}")
        if self.mask_hidden not in MASK_HIDDEN_VARIANTS:
            raise PeagleError(f"mask_hidden must be one of {MASK_HIDDEN_VARIANTS}, got {self.mask_hidden!r}")
        if self.mask_embedding not in MASK_EMBEDDING_VARIANTS:
            raise PeagleError(f"mask_embedding must be one of {MASK_EMBEDDING_VARIANTS}, got {self.mask_embedding!r}")
        if self.schedule not in ("steps", "time"):
            raise PeagleError(f"schedule must be 'steps' or 'time', got {self.schedule!r}")
        if self.schedule == "time" and not self.time_budget_s:
            raise PeagleError("schedule='time' needs time_budget_s. Fix: pass time_budget_s, or schedule='steps'.")
        from .precision import choice_name

        self.autocast = choice_name(self.autocast)
        if self.num_depths < 1 or self.steps < 1 or self.layers < 1:
            raise PeagleError("num_depths, steps and layers must be >= 1.")
        self.betas = tuple(self.betas)
        self.tap_layers = tuple(self.tap_layers) if self.tap_layers else None

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# ============================================================================================ data
def prepare_sequences(model, records, tap_layers=None, features_dir=None, taps_dtype=torch.float32,
                      max_seq_len: int = MAX_SEQ_LEN, progress: bool = True) -> list[dict]:
    """Training sequences with the frozen target's features: ``[{input_ids, taps, labels, prompt_len}]``.

    ``records``: distilled records (``input_ids`` list, ``prompt_len``). Without ``features_dir`` the features
    are computed online once and kept in memory. With it, ``features_dir`` is a cache of feature directories
    written by :func:`peagle_lab.features.extract_features` (``part-*``): sequences found in any complete part
    are read from disk, the missing ones are extracted into a new part first. So extraction can start on the
    sequences distilled so far and later runs only add what is new; both heads read the same features.
    """
    from tqdm.auto import tqdm

    from .features import sequence_features
    from .taps import check_tap_layers, default_tap_layers

    L = model.config.num_hidden_layers
    tap_layers = check_tap_layers(tap_layers or default_tap_layers(L), L)
    ids = [list(r["input_ids"])[:max_seq_len] for r in records]
    if features_dir is not None:
        feats = _cached_features(model, ids, Path(features_dir), tap_layers, progress)
    else:
        feats = [sequence_features(model, s, tap_layers, taps_dtype)
                 for s in tqdm(ids, desc="features", unit="seq", disable=not progress)]
    out = []
    for rec, f in zip(records, feats):
        out.append(dict(input_ids=f["input_ids"].long(), taps=f["taps"], labels=f["greedy_next"].long(),
                        prompt_len=int(rec.get("prompt_len", 1))))
    return out


def _seq_key(ids) -> str:
    return hashlib.sha256(torch.as_tensor(ids, dtype=torch.int32).numpy().tobytes()).hexdigest()


def _cached_features(model, ids: list[list[int]], root: Path, tap_layers, progress: bool) -> list[dict]:
    from .features import extract_features, load_features, read_manifest

    found: dict[str, dict] = {}
    for part in sorted(root.glob("part-*")):
        try:
            man = read_manifest(part)
        except PeagleError:
            continue
        if not man.get("complete"):
            continue
        if tuple(man["tap_layers"]) != tuple(tap_layers):
            raise PeagleError(f"{part} holds taps {man['tap_layers']}, training wants {list(tap_layers)}. Fix: use "
                              "another --features directory for other tap layers.")
        for f in load_features(part):
            found[_seq_key(f["input_ids"])] = f
    keys = [_seq_key(s) for s in ids]
    missing = list(dict.fromkeys(k for k in keys if k not in found))
    if missing and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # several writers in one directory would clash
        raise PeagleError(f"{len(missing)} sequences have no features in {root} yet, and several processes would "
                          "extract them at once. Fix: extract first in one process (`peagle-lab extract "
                          f"--distilled DATA --split train --out {root}/part-train`), then launch the training.")
    if missing:
        todo = {k: s for k, s in zip(keys, ids) if k in set(missing)}
        name = "part-" + hashlib.sha256("".join(missing).encode()).hexdigest()[:12]
        extract_features(model, [todo[k] for k in missing], root / name, tap_layers=tap_layers, progress=progress)
        for f in load_features(root / name):
            found[_seq_key(f["input_ids"])] = f
    return [found[k] for k in keys]


class PackedRows:
    """Deterministic stream of packed rows: epoch ``e`` visits the sequences in ``randperm(seed, e)`` order and
    packs consecutive ones while the row stays within ``row_tokens`` (one sequence at least). The cursor
    (``state_dict``) is part of a checkpoint, so a resumed run sees the same rows. Every process walks the same
    stream (the rows of a step do not depend on the number of processes, so a run resumes at another world
    size); :meth:`Trainer._train_step` gives process ``r`` rows ``r, r + world, ...`` of each step."""

    def __init__(self, sequences, row_tokens: int, seed: int):
        if not sequences:
            raise PeagleError("No training sequences. Fix: distill some first (`peagle-lab distill`).")
        self.seqs, self.row_tokens, self.seed = sequences, row_tokens, seed
        self.epoch, self.pos = 0, 0
        self._order = self._perm(0)

    def _perm(self, epoch):
        return torch.randperm(len(self.seqs), generator=torch.Generator().manual_seed(self.seed * 100003 + epoch))

    def _next_row(self):
        row, tokens = [], 0
        while True:
            if self.pos >= len(self._order):
                if row:
                    return row
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._perm(self.epoch)
            s = self.seqs[int(self._order[self.pos])]
            n = len(s["input_ids"])
            if row and tokens + n > self.row_tokens:
                return row
            row.append(s)
            tokens += n
            self.pos += 1

    def next_rows(self, tokens_wanted: int, min_rows: int = 1) -> list[list[dict]]:
        """The rows of one optimizer step (the global batch): at least ``tokens_wanted`` tokens and ``min_rows``
        rows."""
        rows, tokens = [], 0
        while tokens < tokens_wanted or len(rows) < min_rows:
            row = self._next_row()
            rows.append(row)
            tokens += sum(len(s["input_ids"]) for s in row)
        return rows

    def state_dict(self):
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, st):
        self.epoch, self.pos = st["epoch"], st["pos"]
        self._order = self._perm(self.epoch)


# ============================================================================================ elements & mask
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


@dataclass
class RowPlan:
    x: torch.Tensor  # flat tokens of the row's sequences
    y: torch.Tensor  # flat greedy labels
    taps: torch.Tensor  # (N0, 3H) taps of the depth-0 elements
    depths: list[Depth]


def plan_row(row: list[dict], num_depths: int, ratio: float = 0.7, min_ratio: float = 0.2,
             generator: torch.Generator | None = None) -> RowPlan:
    """Elements of a packed row: depth 0 = every position ``t <= T-2`` of every sequence (anchors = response
    positions plus the last prompt position), depth ``d`` = COD-sampled anchors with ``a + d + 1 < T``."""
    xs, ys, taps, seq, pos, flat, end, anchor = [], [], [], [], [], [], [], []
    off = 0
    for s_id, s in enumerate(row):
        T = len(s["input_ids"])
        if T < 2:
            continue
        t = torch.arange(T - 1)
        xs.append(s["input_ids"])
        ys.append(s["labels"])
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
    return RowPlan(torch.cat(xs), torch.cat(ys), torch.cat(taps), depths)


def training_mask(depths: list[Depth], d: int) -> torch.Tensor:
    """Bool (Q_d, N_0 + ... + N_d), True = may attend: depth-0 keys of the same sequence with anchor <= a, and
    keys of the query's own rollout (same anchor) at depths 1..d. Key order = the cache order (depth by depth)."""
    q = depths[d]
    k0 = depths[0]
    m0 = (k0.seq[None, :] == q.seq[:, None]) & (k0.anchor_pos[None, :] <= q.anchor_pos[:, None])
    parts = [m0] + [depths[e].g[None, :] == q.g[:, None] for e in range(1, d + 1)]
    return torch.cat(parts, dim=1)


def full_training_mask(plan: RowPlan) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
    """Every element against every element (for pictures): bool (N, N) and the ``(seq, anchor, depth)`` of each
    row/column in cache order. Row block ``d`` is :func:`training_mask` padded with False for deeper keys."""
    labels = [(int(s), int(a), d) for d, el in enumerate(plan.depths) for s, a in zip(el.seq, el.anchor_pos)]
    n = len(labels)
    rows = []
    for d in range(len(plan.depths)):
        m = training_mask(plan.depths, d)
        rows.append(torch.cat([m, m.new_zeros(m.shape[0], n - m.shape[1])], dim=1))
    return torch.cat(rows), labels


# ============================================================================================ the trainable model
# The start of mask_hidden is drawn from its own generator seeded with ``seed + MASK_HIDDEN_SEED_OFFSET``: it
# depends on the run's seed only, so two heads of one run setting start alike whatever their mask token id. (It
# was seeded with the mask token id; the offset 16 -- SmolLM2's mask id -- keeps seed-0 runs on the embedded
# target starting exactly where they did.)
MASK_HIDDEN_SEED_OFFSET = 16


def mask_hidden_seed(seed: int) -> int:
    """The seed of the generator that draws ``mask_hidden``'s start for a run with seed ``seed``."""
    return int(seed) + MASK_HIDDEN_SEED_OFFSET


class DraftTrainer(nn.Module):
    """A :class:`PEagleDrafter` plus what training needs. ``forward(plan)`` -> (loss, per-depth metrics).

    Reparametrisations for training only (:meth:`sync_head` writes the plain head back, exactly):

    * the mask token's embedding row is its own parameter ``mask_embedding`` (other rows stay frozen);
    * ``fc`` and ``mask_hidden`` are trained in units of the taps' per-feature RMS ``tap_scale``:
      ``fc.weight = fc_weight / tap_scale`` and ``mask_hidden = tap_scale * mask_hidden_scaled``. The target's
      residual streams differ hugely in scale (SmolLM2: RMS ~3 at tap 2, ~85 at the deeper taps, single values
      above 20,000 at attention-sink positions); Adam moves every weight by about ``lr`` per step, so without
      this a step that is fine for ``fc``'s small inputs throws the fused hidden far off for the large ones
      (loss spikes), and ``mask_hidden`` (in raw tap units) would barely move. The function computed is the same.
    """

    def __init__(self, head: PEagleDrafter, mode: str, mask_hidden: str = "learned", mask_embedding: str = "learned",
                 tap_scale: torch.Tensor | None = None, seed: int = 0):
        super().__init__()
        self.head, self.mode = head, mode
        self.mask_hidden_variant, self.mask_embedding_variant = mask_hidden, mask_embedding
        cfg = head.config
        n_in = head.fc.weight.shape[1]
        scale = torch.ones(n_in) if tap_scale is None else tap_scale.detach().float().clamp_min(1e-6)
        self.register_buffer("tap_scale", scale.to(head.fc.weight))
        head.embed_tokens.weight.requires_grad_(False)
        head.fc.weight.requires_grad_(False)
        head.mask_hidden.requires_grad_(False)
        row = head.embed_tokens.weight[cfg.mask_token_id].detach().clone()
        self.mask_embedding = nn.Parameter(row, requires_grad=(mode == "parallel" and mask_embedding == "learned"))
        with torch.no_grad():
            # fc: the head's own random init, in scaled units (same function: W h = (W * s)(h / s)), but sized for
            # inputs of RMS 1: std 1/sqrt(3H) per scaled weight
            w = torch.randn_like(head.fc.weight) / math.sqrt(n_in)
            self.fc_weight = nn.Parameter(w)
            # mask_hidden: a "typical" tap vector, random with the taps' per-feature scale (learned / random);
            # zeros: all zero. Its own generator, seeded from the run's seed (not from the mask token id)
            m = torch.zeros(n_in) if mask_hidden == "zeros" else torch.randn(
                n_in, generator=torch.Generator().manual_seed(mask_hidden_seed(seed)))
        self.mask_hidden_scaled = nn.Parameter(m.to(head.fc.weight),
                                               requires_grad=(mode == "parallel" and mask_hidden == "learned"))
        # "random": frozen at its random start (the same start as "learned"); "context": unused
        self.register_buffer("t2d_index", target_to_draft_index(head.draft_to_target_ids(), cfg.vocab_size),
                             persistent=False)
        self.sync_head()

    def sync_head(self) -> PEagleDrafter:
        """Write the trained parameters into the plain head (what the checkpoint stores and inference runs)."""
        with torch.no_grad():
            self.head.embed_tokens.weight[self.head.config.mask_token_id] = self.mask_embedding
            self.head.fc.weight.copy_(self.fc_weight / self.tap_scale)
            self.head.mask_hidden.copy_((self.mask_hidden_scaled * self.tap_scale).view_as(self.head.mask_hidden))
        return self.head

    def load_head(self, src: PEagleDrafter) -> None:
        """Start from a trained head of the same shape (``--init-from``): the inverse of :meth:`sync_head`."""
        sd = {k: v for k, v in src.state_dict().items() if k != "embed_tokens.weight"}
        missing, unexpected = self.head.load_state_dict(sd, strict=False)
        if unexpected or [m for m in missing if m != "embed_tokens.weight"]:
            raise PeagleError(f"the --init-from head does not match this model (missing {missing}, unexpected "
                              f"{unexpected}). Fix: continue with the head's settings.")
        with torch.no_grad():
            dt = self.fc_weight.dtype
            self.mask_embedding.copy_(src.embed_tokens.weight[src.config.mask_token_id].to(dt))
            self.fc_weight.copy_(src.fc.weight.to(dt) * self.tap_scale)
            self.mask_hidden_scaled.copy_(src.mask_hidden.to(dt).reshape(-1) / self.tap_scale)
        self.sync_head()

    def fuse(self, taps):
        return F.linear(taps / self.tap_scale, self.fc_weight)

    def mask_slot_hidden(self):
        return F.linear(self.mask_hidden_scaled, self.fc_weight)

    def _embed(self, ids):
        emb = F.embedding(ids, self.head.embed_tokens.weight)
        return torch.where((ids == self.head.config.mask_token_id)[..., None], self.mask_embedding.to(emb.dtype), emb)

    def run_depths(self, plan: RowPlan):
        """Logits and prenorm states of every element, depth by depth: lists of (Q_d, Vd) and (Q_d, H)."""
        head, cfg = self.head, self.head.config
        dev = self.mask_embedding.device
        x, dtype = plan.x.to(dev), self.fc_weight.dtype
        cache = head.new_cache()
        fused0 = self.fuse(plan.taps.to(dev, dtype))
        logits_all, pre_all = [], []
        for d, el in enumerate(plan.depths):
            pos = el.pos.to(dev)
            if d == 0:
                ids, hidden = x[el.flat.to(dev)], fused0
            elif self.mode == "sequential":
                ids, hidden = x[el.flat.to(dev)], pre_all[-1][el.parent.to(dev)]
            else:
                ids = torch.full_like(pos, cfg.mask_token_id)
                if self.mask_hidden_variant == "context":
                    hidden = fused0[el.g.to(dev)]
                else:
                    hidden = self.mask_slot_hidden().to(dtype).reshape(1, -1).expand(len(pos), -1)
            mask = training_mask(plan.depths, d).to(dev)[None, None]
            logits, pre = head(ids[None], hidden[None], pos[None], cache=cache, attn_mask=mask,
                               input_embeds=self._embed(ids)[None])
            logits_all.append(logits[0])
            pre_all.append(pre[0])
        return logits_all, pre_all

    def forward(self, plan: RowPlan):
        logits_all, _ = self.run_depths(plan)
        dev = self.mask_embedding.device
        y = plan.y.to(dev)
        losses, metrics = [], []
        for el, logits in zip(plan.depths, logits_all):
            keep = el.loss.to(dev)
            labels = y[el.flat.to(dev)][keep]
            lg = logits[keep].float()
            draft_labels = self.t2d_index[labels]
            in_vocab = draft_labels >= 0
            n = int(keep.sum())
            if in_vocab.any():
                loss = F.cross_entropy(lg[in_vocab], draft_labels[in_vocab])
                losses.append(loss)
            else:
                loss = lg.sum() * 0.0
            with torch.no_grad():
                pred = self.head.draft_to_target_ids()[lg.argmax(-1)] if n else labels
                correct = int((pred == labels).sum()) if n else 0
            metrics.append(dict(n=n, correct=correct, loss_sum=float(loss.detach()) * n))
        if not losses:
            raise PeagleError("No training label falls inside the draft vocabulary: the vocabulary was built from "
                              "other data. Fix: rebuild it from these sequences (or use the full vocabulary).")
        loss = torch.stack(losses).mean()
        # a row with no depth >= 1 leaves the mask parameters without a gradient; under DDP every process must
        # produce one for every parameter, so they join the graph with weight 0 (the value is unchanged)
        for p in (self.mask_embedding, self.mask_hidden_scaled):
            if p.requires_grad:
                loss = loss + 0.0 * p.sum()
        return loss, metrics


# ============================================================================================ inference helpers
class ContextMaskDrafter(nn.Module):
    """The ``mask_hidden='context'`` variant at inference: mask slots copy the last context slot's fused hidden
    ``fc(h_context)`` instead of ``fc(mask_hidden)`` (notebook 02's experiment; not a vLLM layout).

    A view of ``head``: it holds the head as its only submodule (the same parameters, nothing copied; training or
    loading the head shows here) and overrides ``fuse`` / ``mask_slot_hidden`` only; everything else (``config``,
    ``forward``, ``new_cache``, ``to_target_logits``, ...) is the head's. The head itself is left as it is."""

    def __init__(self, head: PEagleDrafter):
        super().__init__()
        self.head = head
        self._last = None

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)  # parameters, buffers, submodules (``head``) of this module
        except AttributeError:
            if name == "head":
                raise
            return getattr(self.head, name)

    def forward(self, *args, **kwargs):
        return self.head(*args, **kwargs)

    def fuse(self, taps):
        out = self.head.fuse(taps)
        self._last = out.reshape(-1, out.shape[-1])[-1:].reshape(1, 1, -1)
        return out

    def mask_slot_hidden(self):
        if self._last is None:
            raise PeagleError("ContextMaskDrafter.mask_slot_hidden() needs a fuse() of the context first.")
        return self._last


def as_context_drafter(head: PEagleDrafter) -> ContextMaskDrafter:
    """The ``context`` variant of ``head`` (shares its parameters); ``head`` keeps its class and behaviour."""
    return head if isinstance(head, ContextMaskDrafter) else ContextMaskDrafter(head)


# ============================================================================================ schedule & state
def lr_factor(cfg: TrainConfig, step: int, elapsed_s: float) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine from 1 to ``min_lr_ratio`` over the steps (or the time
    budget with ``schedule='time'``)."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "time":
        p = min(elapsed_s / cfg.time_budget_s, 1.0)
    else:
        p = min((step - cfg.warmup_steps) / max(cfg.steps - cfg.warmup_steps, 1), 1.0)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p))


def tap_rms(sequences, max_tokens: int = 65536) -> torch.Tensor:
    """Per-feature RMS of the taps over (up to ``max_tokens`` of) the training sequences: (3H,)."""
    total, n = None, 0
    for s in sequences:
        t = s["taps"][: max_tokens - n].float()
        sq = t.pow(2).sum(0)
        total = sq if total is None else total + sq
        n += t.shape[0]
        if n >= max_tokens:
            break
    return (total / max(n, 1)).sqrt()


def _atomic_torch_save(obj, path: Path):
    from .atomic import atomic_write

    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def _trainable_state(module: DraftTrainer) -> dict:
    # the embedding table is the target's (frozen) and is rebuilt from it: keep checkpoints small
    module.sync_head()
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items() if k != "head.embed_tokens.weight"}


@dataclass
class TrainResult:
    head: PEagleDrafter
    log: list[dict]
    steps_done: int
    train_time_s: float
    stopped_by: str  # "steps", "time_budget", "stop_after", "interrupt"
    out_dir: Path | None = None
    info: dict = field(default_factory=dict)


# ============================================================================================ the trainer
class Trainer:
    """``Trainer(cfg, model, sequences, out_dir=...).train()``.

    ``model``: the frozen target (its embeddings, norm and lm_head start the head). ``sequences``: from
    :func:`prepare_sequences`. With ``out_dir`` the head is saved there (``config.json`` + ``model.safetensors``)
    and the training state (weights, optimizer, step, data cursor, RNG) to ``state_dir`` (default
    ``out_dir/checkpoint``) every ``save_every`` steps, when the time budget ends and on Ctrl-C;
    ``resume=True`` continues from it. ``log`` rows also go to ``state_dir/train_log.jsonl``.
    """

    def __init__(self, cfg: TrainConfig, model, sequences: list[dict], tokenizer=None, out_dir=None,
                 state_dir=None, resume: bool = False, progress: bool = True, draft_ids=None, verbose: bool = True,
                 overwrite: bool = False):
        self.cfg, self.model, self.seqs = cfg, model, sequences
        self.out_dir = Path(out_dir) if out_dir else None
        self.state_dir = Path(state_dir) if state_dir else (self.out_dir / "checkpoint" if self.out_dir else None)
        self.progress, self.verbose = progress, verbose
        from .features import target_identity
        from .precision import resolve_dtype

        self.acc = _make_accelerator(cfg, next(model.parameters()).device)
        self.device = self.acc.device if self.acc else next(model.parameters()).device
        rank, world = (self.acc.process_index, self.acc.num_processes) if self.acc else (0, 1)
        self.rank, self.world, self.is_main = rank, world, rank == 0
        check_world_size(cfg, world)
        # bf16 autocast where the hardware multiplies bf16 natively (CUDA, AMX, AVX512-BF16); fp32 elsewhere
        self.autocast = resolve_dtype(cfg.autocast, self.device, warn=verbose)
        self.fingerprint = target_identity(model)  # the same for the fp32 and the bf16 copy of a target
        source = self._init_source(model) if cfg.init_from else None
        if source is not None:
            if cfg.mask_token_id is not None and cfg.mask_token_id != source.config.mask_token_id:
                raise PeagleError(f"--mask-token-id {cfg.mask_token_id} differs from the --init-from head's "
                                  f"{source.config.mask_token_id}. Fix: leave --mask-token-id unset.")
            draft_ids = source.draft_to_target_ids().cpu()
        mask_id = source.config.mask_token_id if source is not None else cfg.mask_token_id
        mask_id = mask_id if mask_id is not None else (
            pick_mask_token_id(tokenizer) if tokenizer is not None else None)
        if mask_id is None:
            raise PeagleError("TrainConfig.mask_token_id is unset and no tokenizer was given to pick one. "
                              "Fix: pass tokenizer=... or mask_token_id=<an unused token id>.")
        self.mask_token_id = int(mask_id)
        V = model.config.vocab_size
        if draft_ids is None:
            draft_ids, self.coverage = self._draft_vocab(V, tokenizer)
        else:
            self.coverage = coverage(self._label_counts(V), draft_ids, V)
        self.draft_ids = torch.as_tensor(draft_ids, dtype=torch.long)

        torch.manual_seed(cfg.seed)
        hcfg = PEagleConfig.from_target(
            model.config, num_hidden_layers=cfg.layers, draft_vocab_size=self.draft_ids.numel(),
            aux_layer_ids=cfg.tap_layers, mask_token_id=self.mask_token_id, mode=cfg.mode,
            num_speculative_tokens=cfg.num_depths, embed_shared_with_target=True, target=cfg.target,
            extra=dict(mask_hidden_variant=cfg.mask_hidden, mask_embedding_variant=cfg.mask_embedding,
                       draft_vocab_coverage=round(self.coverage, 5), target_fingerprint=self.fingerprint))
        head = PEagleDrafter(hcfg)
        head.set_draft_vocab(self.draft_ids)
        head.init_from_target(model, self.draft_ids)
        self.module = DraftTrainer(head, cfg.mode, cfg.mask_hidden, cfg.mask_embedding,
                                   tap_scale=tap_rms(sequences), seed=cfg.seed).to(self.device)
        if source is not None:
            self.module.load_head(source.to(self.device))
        if cfg.freeze_lm_head:
            head.lm_head.weight.requires_grad_(False)
            head.norm.weight.requires_grad_(False)
        pretrained = {id(p) for p in (head.lm_head.weight, head.norm.weight)}
        groups = {}
        for p in self.module.parameters():
            if p.requires_grad:
                key = (id(p) in pretrained, p.dim() >= 2)
                groups.setdefault(key, []).append(p)
        self.opt = torch.optim.AdamW(
            [{"params": ps, "weight_decay": cfg.weight_decay if matrix else 0.0,
              "lr_ratio": cfg.lm_head_lr_ratio if pre else 1.0} for (pre, matrix), ps in sorted(groups.items())],
            lr=cfg.lr, betas=cfg.betas)
        self.rows = PackedRows(sequences, cfg.row_tokens, cfg.seed)
        self.gen = torch.Generator().manual_seed(cfg.seed + 1)  # COD sampling
        self.step, self.elapsed, self.log, self.tokens_seen = 0, 0.0, [], 0
        # tokens seen by the heads this one continues (snapshots are named by the cumulative count)
        self.tokens_before = 0
        if cfg.init_from:
            from .lineage import cumulative, history_of

            self.tokens_before = int(cumulative(history_of(cfg.init_from), dict(tokens_seen=0))["tokens_seen"] or 0)
        if resume:
            self._load_state()
        elif self.state_dir is not None and (self.state_dir / STATE_FILE).exists() and not overwrite:
            raise PeagleError(f"{self.state_dir} already holds a training state. Fix: pass resume=True (`--resume`) "
                              "to continue it, --overwrite to start afresh over it, or another --out / --state-dir.")
        if not resume and not overwrite and self.out_dir is not None and (self.out_dir / "config.json").exists():
            raise PeagleError(f"{self.out_dir} already holds a head. Fix: --resume to continue its training state, "
                              "--overwrite to replace it, or another --out.")
        self.model_for_step = self.module
        if self.acc:
            self.model_for_step, self.opt = self.acc.prepare(self.module, self.opt)

    def _init_source(self, model) -> PEagleDrafter:
        from .lineage import check_compatible, head_config

        cfg = self.cfg
        path = Path(cfg.init_from)
        head_config(path)  # a clear error naming --init-from when it is no head directory
        src = PEagleDrafter.from_pretrained(path, target=model, device="cpu")
        V = model.config.vocab_size
        check_compatible(src.config, dict(
            mode=cfg.mode, num_hidden_layers=cfg.layers, draft_vocab_size=cfg.draft_vocab_size or V,
            hidden_size=model.config.hidden_size, vocab_size=V, target_fingerprint=self.fingerprint,
            aux_hidden_state_layer_ids=cfg.tap_layers), path)
        return src

    # ---- draft vocabulary ----
    def _label_counts(self, V):
        """Counts of what the drafter is trained to predict: the labels at anchor positions."""
        return count_tokens([s["labels"][max(s["prompt_len"] - 1, 0):] for s in self.seqs], V)

    def _draft_vocab(self, V, tokenizer):
        size = self.cfg.draft_vocab_size or V
        eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
        always = [self.mask_token_id] + ([eos] if isinstance(eos, int) else list(eos or []))
        counts = self._label_counts(V)
        ids = build_draft_vocab(counts, size, V, always=always)
        return ids, coverage(counts, ids, V)

    # ---- state ----
    def state_dict(self) -> dict:
        return dict(step=self.step, elapsed_s=self.elapsed, model=_trainable_state(self.module),
                    optimizer=self.opt.state_dict(), data=self.rows.state_dict(), cod_generator=self.gen.get_state(),
                    config=asdict(self.cfg), draft_ids=self.draft_ids, mask_token_id=self.mask_token_id,
                    torch_rng=torch.get_rng_state(), tokens_seen=self.tokens_seen)

    def _load_state(self):
        from .settings import display_path

        path = self.state_dir / STATE_FILE if self.state_dir else None
        if path is None or not path.exists():
            if self.verbose:
                print(f"[train] no state at {display_path(path)}: starting from step 0")
            return
        st = torch.load(path, map_location="cpu", weights_only=False)
        check_resume_config(st.get("config") or {}, asdict(self.cfg), path)
        if not torch.equal(st["draft_ids"], self.draft_ids) or st["mask_token_id"] != self.mask_token_id:
            raise PeagleError(f"{path} was trained with another draft vocabulary or mask token. Fix: resume with the "
                              "same data and settings, or start a new run in another directory.")
        missing, unexpected = self.module.load_state_dict(st["model"], strict=False)
        if unexpected or [m for m in missing if m != "head.embed_tokens.weight"]:
            raise PeagleError(f"{path} does not match this model ({missing}, {unexpected}): trained with other "
                              "settings (layers, mode, draft vocabulary). Fix: resume with the same settings.")
        self.opt.load_state_dict(st["optimizer"])
        self.rows.load_state_dict(st["data"])
        self.gen.set_state(st["cod_generator"])
        torch.set_rng_state(st["torch_rng"])
        self.step, self.elapsed = st["step"], st["elapsed_s"]
        self.tokens_seen = int(st.get("tokens_seen", 0))
        log_path = self.state_dir / LOG_FILE
        if log_path.exists():  # drop rows written after the checkpoint (a crash between two saves)
            self.log = [r for r in map(json.loads, log_path.read_text().splitlines()) if r["step"] <= self.step]
            write_text(log_path, "".join(json.dumps(r) + "\n" for r in self.log))
        if self.verbose:
            print(f"[train] resumed from {display_path(path)} at step {self.step} ({self.elapsed:.0f} s trained)")

    def save(self):
        if not self.is_main:
            return
        if self.out_dir is not None:
            self.save_head(self.out_dir)
        if self.state_dir is not None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            _atomic_torch_save(self.state_dict(), self.state_dir / STATE_FILE)

    def save_head(self, path):
        head = self.module.sync_head()
        head.config.extra["trained_steps"] = self.step
        return head.save_pretrained(path)

    def _all_agree(self, flag: bool) -> bool:
        """``flag`` of any process, on every process (clocks differ: all must stop at the same step)."""
        if self.world <= 1:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        return bool(self.acc.reduce(t, reduction="sum").item() > 0)

    def _maybe_snapshot(self, step_tokens: int) -> None:
        """A head copy in ``state_dir/snapshots/tokens-N`` each time the tokens seen cross a multiple of
        ``snapshot_every_tokens`` (N counts the tokens of the heads this one continues, too)."""
        every = self.cfg.snapshot_every_tokens
        if not every or not self.is_main or self.state_dir is None:
            return
        if self.tokens_seen // every > (self.tokens_seen - step_tokens) // every:
            self.save_head(self.state_dir / "snapshots" / f"tokens-{self.tokens_before + self.tokens_seen:09d}")

    # ---- one optimizer step ----
    def _train_step(self):
        cfg = self.cfg
        rows = self.rows.next_rows(cfg.batch_tokens, min_rows=self.world)
        # every process plans every row with the shared COD generator (it stays in step across processes and
        # with a single-process run), then keeps its own rows
        plans = [plan_row(r, cfg.num_depths, cfg.cod_ratio, cfg.cod_min_ratio, self.gen) for r in rows]
        weights = [sum(len(s["input_ids"]) for s in r) for r in rows]
        total = sum(weights)  # the global batch: the loss is its token-weighted mean, whatever the world size
        plans, weights = plans[self.rank::self.world], weights[self.rank::self.world]
        lr = cfg.lr * lr_factor(cfg, self.step, self.elapsed)
        for group in self.opt.param_groups:
            group["lr"] = lr * group["lr_ratio"]
        self.opt.zero_grad(set_to_none=True)
        agg = [dict(n=0, correct=0, loss_sum=0.0) for _ in range(cfg.num_depths)]
        loss_total = 0.0
        amp = self.autocast == torch.bfloat16
        for i, (plan, w) in enumerate(zip(plans, weights)):
            sync_ctx = (self.acc.no_sync(self.model_for_step) if self.acc and i < len(plans) - 1
                        else contextlib.nullcontext())
            with sync_ctx, torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=amp):
                loss, metrics = self.model_for_step(plan)
                scaled = loss * (w / total * self.world)  # DDP averages the processes' gradients
                if self.acc:
                    self.acc.backward(scaled)
                else:
                    scaled.backward()
            loss_total += float(loss.detach()) * w / total
            for a, m in zip(agg, metrics):
                for k in a:
                    a[k] += m[k]
        if self.world > 1:  # the logged loss and accuracies are the global batch's
            stats = torch.tensor([loss_total] + [a[k] for a in agg for k in ("n", "correct", "loss_sum")],
                                 dtype=torch.float64, device=self.device)
            stats = self.acc.reduce(stats, reduction="sum").tolist()
            loss_total = stats[0]
            for j, a in enumerate(agg):
                a["n"], a["correct"], a["loss_sum"] = int(stats[1 + 3 * j]), int(stats[2 + 3 * j]), stats[3 + 3 * j]
        params = [p for p in self.module.parameters() if p.requires_grad]
        if self.acc:
            gnorm = self.acc.clip_grad_norm_(params, cfg.grad_clip)
        else:
            gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        self.opt.step()
        return dict(loss=loss_total, lr=lr, grad_norm=float(gnorm), tokens=total,
                    acc=[round(a["correct"] / a["n"], 4) if a["n"] else None for a in agg],
                    depth_loss=[round(a["loss_sum"] / a["n"], 4) if a["n"] else None for a in agg],
                    elements=[a["n"] for a in agg])

    # ---- the loop ----
    def train(self, stop_after: int | None = None) -> TrainResult:
        """Run until ``cfg.steps`` (or the time budget, or ``stop_after`` more steps: a simulated interruption)."""
        from tqdm.auto import tqdm

        cfg = self.cfg
        self.module.train()
        log_path = None
        if self.is_main and self.state_dir is not None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.state_dir / LOG_FILE
        bar = tqdm(total=cfg.steps, initial=self.step, desc=f"train {cfg.mode}", unit="step",
                   disable=not (self.progress and self.is_main))
        stopped_by, done_here, step_times = "steps", 0, []
        try:
            while self.step < cfg.steps:
                if cfg.time_budget_s is not None:
                    est = sorted(step_times)[len(step_times) // 2] if step_times else 0.0
                    if self._all_agree(self.elapsed + est > cfg.time_budget_s):
                        stopped_by = "time_budget"
                        break
                if stop_after is not None and done_here >= stop_after:
                    stopped_by = "stop_after"
                    break
                t0 = time.perf_counter()
                row = self._train_step()
                dt = time.perf_counter() - t0
                step_times.append(dt)
                self.elapsed += dt
                self.step += 1
                done_here += 1
                self.tokens_seen += row["tokens"]
                row = dict(step=self.step, time_s=round(self.elapsed, 2), step_s=round(dt, 3),
                           tokens_seen=self.tokens_seen, **row)
                row["loss"] = round(row["loss"], 4)
                self.log.append(row)
                if log_path is not None and (self.step % cfg.log_every == 0 or self.step == cfg.steps):
                    with open(log_path, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
                bar.update(1)
                bar.set_postfix(loss=f"{row['loss']:.3f}", acc0=row["acc"][0], accK=row["acc"][-1],
                                tok_s=f"{self.tokens_seen / max(self.elapsed, 1e-9):.0f}")
                self._maybe_snapshot(row["tokens"])
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save()
        except KeyboardInterrupt:
            stopped_by = "interrupt"  # the step in flight never reached opt.step(): the state is consistent
            print(f"\n[train] interrupted: saving the state at step {self.step}")
        finally:
            bar.close()
        self.save()
        self.module.eval()
        if self.verbose and self.is_main:
            print(f"[train] {self.step} steps, {self.elapsed:.0f} s of training (stopped by {stopped_by})")
        if stopped_by == "interrupt":
            raise KeyboardInterrupt
        return TrainResult(self.module.sync_head(), self.log, self.step, self.elapsed, stopped_by, self.out_dir,
                           dict(draft_vocab_size=int(self.draft_ids.numel()), draft_vocab_coverage=self.coverage,
                                mask_token_id=self.mask_token_id, tokens_seen=self.tokens_seen,
                                tokens_per_s=round(self.tokens_seen / max(self.elapsed, 1e-9), 1),
                                autocast=str(self.autocast).replace("torch.", "")))


def check_world_size(cfg: TrainConfig, world: int) -> None:
    """Refuse a global batch that the processes cannot share evenly."""
    if world <= 1:
        return
    rows = cfg.batch_tokens // cfg.row_tokens
    if cfg.batch_tokens % cfg.row_tokens or rows % world:
        raise PeagleError(f"--batch-tokens {cfg.batch_tokens} is {cfg.batch_tokens / cfg.row_tokens:g} rows of "
                          f"--row-tokens {cfg.row_tokens}, which {world} processes cannot share evenly. Fix: a "
                          f"--batch-tokens that is a multiple of {world} x {cfg.row_tokens} = "
                          f"{world * cfg.row_tokens} (e.g. {max(rows // world, 1) * world * cfg.row_tokens}), or "
                          "another number of processes.")


def _make_accelerator(cfg: TrainConfig, device):
    if cfg.accelerate == "no":
        return None
    multi = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if cfg.accelerate == "auto" and not (torch.cuda.is_available() or multi):
        return None
    try:
        from accelerate import Accelerator
    except ImportError:
        if multi:
            raise PeagleError("Several processes were launched but `accelerate` is not installed. "
                              "Fix: pip install accelerate")
        return None
    # on the CPU (gloo) accelerate needs cpu=True to join the processes torchrun started; bf16 autocast is
    # applied by the trainer itself
    return Accelerator(mixed_precision="no", cpu=torch.device(device).type == "cpu")


def precision_probe(cfg: TrainConfig, model, sequences, tokenizer=None, rounds: int = 3) -> dict:
    """Training tokens/s in float32 and in bf16 autocast, measured side by side: ``rounds`` optimizer steps of
    each, interleaved (fp32, bf16, fp32, ...), on the run's own settings and data; the median step of each."""
    from dataclasses import replace

    trainers = {name: Trainer(replace(cfg, autocast=name, steps=rounds + 1, time_budget_s=None, schedule="steps",
                                      init_from=None, snapshot_every_tokens=None), model, sequences,
                              tokenizer=tokenizer, progress=False, verbose=False)
                for name in ("float32", "bfloat16")}
    rates = {name: [] for name in trainers}
    for r in range(rounds + 1):  # the first step of each is a warm-up
        for name, tr in trainers.items():
            t0 = time.perf_counter()
            row = tr._train_step()
            if r:
                rates[name].append(row["tokens"] / (time.perf_counter() - t0))
    return {name: round(sorted(v)[len(v) // 2], 1) for name, v in rates.items()} | dict(
        rounds=rounds, batch_tokens=cfg.batch_tokens, threads=torch.get_num_threads())


def train_head(cfg: TrainConfig, model, sequences, tokenizer=None, **kw) -> TrainResult:
    """Convenience: ``Trainer(cfg, model, sequences, tokenizer, **kw).train()``."""
    stop_after = kw.pop("stop_after", None)
    return Trainer(cfg, model, sequences, tokenizer=tokenizer, **kw).train(stop_after=stop_after)


# ============================================================================================ evaluation
def make_drafter(head: PEagleDrafter, mode: str | None = None):
    """A :class:`HeadDrafter` for ``head`` (the ``context`` mask-hidden variant gets its own hidden source)."""
    from .speculative import HeadDrafter

    if head.config.extra.get("mask_hidden_variant") == "context":
        head = as_context_drafter(head)
    return HeadDrafter(head, mode)


def evaluate_head(model, tokenizer, head: PEagleDrafter, prompts: list[str], ks=(1, 2, 3, 4, 5, 6, 7, 8),
                  mode: str | None = None, max_new_tokens: int = 128, progress: bool = True,
                  check_lossless: bool = True, reference: dict | None = None) -> dict:
    """Greedy speculative decoding of ``prompts`` (texts or prompt records, chat template) at every K in ``ks``;
    checks every output against plain greedy decoding: identical in float32, and in bfloat16 identical or
    diverging only at a near-tie (each divergence is reported with its logit margin). Returns acceptance length per K (pooled over prompts: 1 + accepted / rounds)
    and per-position acceptance ``P(slot j accepted | slots < j accepted)``.

    ``reference``: a dict reused across calls to keep the plain greedy outputs (one target pass per prompt
    instead of one per prompt and head)."""
    import warnings

    from tqdm.auto import tqdm

    from .prompts import chat_ids, record_messages
    from .speculative import SpecStats, TargetRunner, first_divergence, plain_generate, speculative_generate

    runner = TargetRunner(model, head.config.aux_hidden_state_layer_ids)
    drafter = make_drafter(head, mode)
    eos = tokenizer.eos_token_id
    per_k = {k: SpecStats(k=k) for k in ks}
    times = {k: 0.0 for k in ks}
    tokens, divergences = 0, []
    dtype = next(model.parameters()).dtype
    bar = tqdm(total=len(prompts) * (len(ks) + 1), desc=f"eval {drafter.mode}", disable=not progress)
    for item in prompts:  # a prompt text, or a prompt record (with a multi-turn history)
        text, history = record_messages(item)
        ids = chat_ids(tokenizer, text, history=history)
        key = (text, json.dumps(history), max_new_tokens)
        if reference is None or key not in reference:
            plain = plain_generate(runner, ids, max_new_tokens, eos_ids=eos)
            if reference is not None:
                reference[key] = plain
        else:
            plain = reference[key]
        base = plain.tokens
        tokens += len(base)
        bar.update(1)
        for k in ks:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # K above the trained K: reported, not warned per prompt
                res = speculative_generate(runner, drafter, ids, k, max_new_tokens, eos_ids=eos)
            if check_lossless and res.tokens != base:
                div = first_divergence(res.tokens, plain, dtype)
                if not div.near_tie:
                    raise AssertionError(f"speculative output differs from plain greedy at K={k} for prompt "
                                         f"{text[:60]!r} at token {div.position} (plain margin {div.margin:.3g}, "
                                         f"{dtype} near-tie bound {div.bound:.3g}): the loop is not lossless")
                divergences.append(dict(k=k, prompt=text[:60], **div.as_dict()))
            st = per_k[k]
            st.rounds += res.stats.rounds
            st.accepted += res.stats.accepted
            st.attempted_at = [a + b for a, b in zip(st.attempted_at, res.stats.attempted_at)]
            st.accepted_at = [a + b for a, b in zip(st.accepted_at, res.stats.accepted_at)]
            times[k] += res.seconds
            bar.update(1)
    bar.close()
    return dict(
        mode=drafter.mode, prompts=len(prompts), max_new_tokens=max_new_tokens, new_tokens=tokens,
        lossless=(True if dtype == torch.float32 else "near-tie") if check_lossless else None,
        divergences=divergences,
        acceptance_length={k: round(per_k[k].acceptance_length, 4) for k in ks},
        # None: slot never reached (every earlier slot was rejected first)
        per_position_acceptance={k: [None if math.isnan(x) else round(x, 4) for x in per_k[k].per_position_acceptance]
                                 for k in ks},
        rounds={k: per_k[k].rounds for k in ks},
        seconds={k: round(times[k], 2) for k in ks},
    )


# fields a resumed run may change; any other difference changes what the saved state means
RESUMABLE_FIELDS = ("steps", "time_budget_s", "log_every", "save_every", "accelerate", "autocast",
                    "snapshot_every_tokens")


def check_resume_config(saved: dict, now: dict, path) -> None:
    """Refuse a resume whose settings differ from the saved state's, naming every differing field."""
    def norm(v):
        return list(v) if isinstance(v, tuple) else v

    diff = {k: (saved[k], now.get(k)) for k in saved
            if k not in RESUMABLE_FIELDS and k in now and norm(saved[k]) != norm(now.get(k))}
    if diff:
        fields = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, a, b in ((k, *v) for k, v in sorted(diff.items())))
        raise PeagleError(f"{path} was trained with other settings ({fields}). Fix: resume with the saved values, "
                          f"or start a new run in another --out. Only {', '.join(RESUMABLE_FIELDS)} may change on "
                          "resume.")


# ============================================================================================ records & CLI
def machine_info(model=None) -> dict:
    from .hardware import cpu_name
    from .precision import host_slug, isa_record

    info = dict(platform=platform.platform(), python=platform.python_version(), torch=torch.__version__,
                cpu=cpu_name(), cpu_count=os.cpu_count(), host=host_slug(), **isa_record(),
                target_dtype=str(next(model.parameters()).dtype).replace("torch.", "") if model is not None else None,
                torch_threads=torch.get_num_threads(),
                cuda=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    try:
        info["load_average_1m"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    return info


def write_training_record(out_dir, record: dict) -> None:
    """``training.json`` (everything) and ``TRAINING.md`` (the same for people) in the head directory."""
    out_dir = Path(out_dir)
    write_json(out_dir / "training.json", record, indent=2)
    c = record["config"]
    what = "P-EAGLE: slots 2..K are mask slots" if c["mode"] == "parallel" else "EAGLE-3 training-time test"
    m = record["machine"]
    lines = [f"# {out_dir.name}: {c['mode']} drafter head for {c['target']}", "",
             "Reproduce (from the repository root):", "", "```bash", record["command"], "```", "",
             "## Training",
             f"- mode: {c['mode']} ({what}), "
             f"trained for K={c['num_depths']}, {c['layers']} drafter layer(s), mask_hidden={c['mask_hidden']}, "
             f"mask embedding={c['mask_embedding']}, mask token id {record['mask_token_id']}",
             f"- data: {record['data']['sequences']} self-distilled sequences ({record['data']['tokens']:,} tokens, "
             f"{record['data']['response_tokens']:,} response tokens) from `{record['data']['file']}`"
             + (f", split `{record['data']['split']}` ({record['data'].get('left_out', 0)} held-out records left "
                "out)" if record["data"].get("split") else ""),
             f"- draft vocabulary: {record['draft_vocab']['size']} ids, covering "
             f"{100 * record['draft_vocab']['coverage']:.2f}% of the training labels",
             f"- {record['steps_done']} optimizer steps x ~{c['batch_tokens']} tokens, lr {c['lr']} (warm-up "
             f"{c['warmup_steps']}, cosine over {c['schedule']}), COD ratio {c['cod_ratio']} / min "
             f"{c['cod_min_ratio']}",
             f"- training time {record['train_time_s']:.0f} s (budget {c['time_budget_s']}), feature preparation "
             f"{record['feature_time_s']:.0f} s, stopped by {record['stopped_by']}",
             *([f"- tokens seen: {record['tokens_seen']:,} ({record['tokens_per_s']:.0f} tokens/s), precision "
                f"{record['autocast']} (`--autocast {c.get('autocast', 'auto')}`)"] if record.get("tokens_seen") else []),
             *([f"- training tokens/s measured side by side on this run's data: float32 "
                f"{record['precision_probe']['float32']:.0f}, bf16 autocast {record['precision_probe']['bfloat16']:.0f}"]
               if record.get("precision_probe") else []),
             *([f"- features: {record['features']['source']}, {record['features']['seconds']:.0f} s"]
               if record.get("features") else []),
             f"- machine: {m['cpu']} (host {m.get('host')}), {m['cpu_count']} cores (load average "
             f"{m.get('load_average_1m')} at the end), torch "
             f"threads {m['torch_threads']}, cuda {m['cuda']}, torch {m['torch']}",
             f"- final per-depth train accuracy (mean of the last 10 steps): {record['final_train_accuracy']}", ""]
    if record.get("note"):
        lines[-1:-1] = [f"- note: {record['note']}"]
    if record.get("history"):
        cum = record.get("cumulative") or {}
        lines += ["## History", "", f"Continued (`--init-from`) from earlier runs; {record.get('warm_restart')}. "
                  f"Cumulative over {cum.get('runs')} runs: {cum.get('tokens_seen')} tokens seen, "
                  f"{cum.get('steps')} steps, {cum.get('train_time_s')} s of training.", "",
                  "| run | data | tokens seen | steps | training s | precision | host |", "|---|---|---|---|---|---|---|"]
        for h in record["history"]:
            lines.append(f"| {h.get('head')} | {h.get('data')} | {h.get('tokens_seen')} | {h.get('steps')} | "
                         f"{h.get('train_time_s')} | {h.get('autocast')} | {h.get('host')} |")
        lines.append("")
    for key in ("eval", "eval_val"):
        ev = record.get(key) or {}
        if not ev:
            continue
        where = ev.get("prompt_set", "HumanEval prompts")
        same = ("outputs identical to plain greedy" if ev.get("lossless") is True else
                f"{ev.get('dtype')}: every output identical to plain greedy or diverging only at a near-tie "
                f"({len(ev.get('divergences') or [])} divergences)")
        lines += [f"## Evaluation: {where} (greedy, {same})", "",
                  f"{ev['prompts']} prompts x up to {ev['max_new_tokens']} new tokens, mode {ev['mode']}, target "
                  f"{ev.get('dtype')}.", "",
                  "Per-position acceptance: P(slot j accepted | slots before j accepted); '-' = slot never reached.",
                  "", "| K | acceptance length | per-position acceptance |", "|---|---|---|"]
        for k, al in ev["acceptance_length"].items():
            pp = ", ".join("-" if x is None else f"{x:.2f}" for x in ev["per_position_acceptance"][k])
            lines.append(f"| {k} | {al:.3f} | {pp} |")
        lines.append("")
    write_text(out_dir / "TRAINING.md", "\n".join(lines))


def final_accuracy(log: list[dict], last: int = 10) -> list[float | None]:
    rows = log[-last:]
    if not rows:
        return []
    out = []
    for d in range(len(rows[0]["acc"])):
        vals = [r["acc"][d] for r in rows if d < len(r["acc"]) and r["acc"][d] is not None]
        out.append(round(sum(vals) / len(vals), 4) if vals else None)
    return out


def check_data_target(meta: dict, model, path) -> None:
    """Refuse distilled data whose meta names another target. ``target_identity`` does not depend on the dtype
    the target was loaded in; files written before it existed carry only the exact ``target_fingerprint``, which
    is comparable only with a float32 copy of the target (a bf16 copy has other bits), so they are checked then."""
    from .features import target_fingerprint, target_identity

    if meta.get("target_identity"):
        ok, theirs, mine = meta["target_identity"] == target_identity(model), meta["target_identity"], \
            target_identity(model)
    elif meta.get("target_fingerprint") and next(model.parameters()).dtype == torch.float32:
        ok, theirs, mine = meta["target_fingerprint"] == target_fingerprint(model), meta["target_fingerprint"], \
            target_fingerprint(model)
    else:
        return
    if not ok:
        raise PeagleError(f"{path} was distilled from another target (fingerprint {theirs}, this target {mine}, "
                          f"{meta.get('target')!r}). Fix: train with the target it was distilled from (--target), "
                          "or distill again with this one.")


def register_cli(sub):
    from .cli import add_target_options

    p = sub.add_parser("train", help="train a P-EAGLE (parallel) or EAGLE-3 (sequential) drafter head")
    p.add_argument("--data", required=True, help="distilled sequences (JSONL from `peagle-lab distill`)")
    p.add_argument("--num-sequences", type=int, default=None, help="use the first N sequences (default: all)")
    p.add_argument("--split", choices=["train", "val", "all"], default="train",
                   help="prompts of the scale mix to train on (default train: the held-out 5%% never trained on)")
    p.add_argument("--init-from", default=None, metavar="HEAD_DIR",
                   help="continue a trained head (its weights, draft vocabulary, mask token; fresh optimizer)")
    p.add_argument("--autocast", choices=["auto", "float32", "bfloat16"], default="auto",
                   help="training precision (auto: bf16 autocast on CUDA and CPUs with AMX/AVX512-BF16)")
    p.add_argument("--freeze-lm-head", action="store_true", help="keep lm_head and final norm at the target's")
    p.add_argument("--probe-precision", action="store_true",
                   help="first measure training tokens/s in float32 and in bf16 autocast (recorded), then train")
    p.add_argument("--snapshot-every-tokens", type=int, default=None,
                   help="save a head copy every N training tokens (for the acceptance-vs-tokens curve)")
    p.add_argument("--features", default=None,
                   help="feature shard directory (extracted there when missing); default: online, cached in memory")
    p.add_argument("--out", required=True, help="head directory to write (config.json + model.safetensors)")
    p.add_argument("--state-dir", default=None, help="training state + log (default: OUT/checkpoint)")
    p.add_argument("--resume", action="store_true", help="continue from the state in --state-dir")
    p.add_argument("--overwrite", action="store_true", help="replace a head or training state already in --out")
    p.add_argument("--mode", choices=["parallel", "sequential"], default="parallel")
    p.add_argument("-K", "--num-depths", type=int, default=8, help="K: depths (draft slots) trained for")
    p.add_argument("--layers", type=int, default=None, help="drafter layers (default 1, or the --init-from head's)")
    p.add_argument("--draft-vocab-size", type=int, default=None,
                   help="draft vocabulary (default 16384, or the --init-from head's; 0: the full target vocabulary)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--time-budget", type=float, default=None, help="seconds of training, then stop and save")
    p.add_argument("--schedule", choices=["steps", "time"], default=None,
                   help="cosine over steps or over the time budget (default: time when --time-budget is given)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--lm-head-lr-ratio", type=float, default=0.25, help="lr multiplier of lm_head and final norm")
    p.add_argument("--batch-tokens", type=int, default=2048, help="sequence tokens per optimizer step")
    p.add_argument("--row-tokens", type=int, default=512, help="sequence tokens packed into one forward")
    p.add_argument("--cod-ratio", type=float, default=0.7)
    p.add_argument("--cod-min-ratio", type=float, default=0.2)
    p.add_argument("--mask-hidden", choices=MASK_HIDDEN_VARIANTS, default="learned")
    p.add_argument("--mask-embedding", choices=MASK_EMBEDDING_VARIANTS, default="learned")
    p.add_argument("--mask-token-id", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-every", type=int, default=50)
    add_target_options(p)
    p.add_argument("--eval-prompts", type=int, default=0, help="HumanEval prompts to evaluate on afterwards")
    p.add_argument("--eval-val-prompts", type=int, default=0,
                   help="held-out prompts (split val of the scale mix) to evaluate on afterwards")
    p.add_argument("--eval-max-new-tokens", type=int, default=128)
    p.add_argument("--eval-ks", default="1,2,3,4,5,6,7,8")
    p.add_argument("--note", default=None, help="free text recorded in training.json / TRAINING.md")
    p.set_defaults(func=_run_cli)


def _run_cli(args):
    from .cli import load_cli_target
    from .data import read_distilled, select_split
    from .models import target_name
    from .settings import display_path, seed_everything

    seed_everything(args.seed)
    layers, vocab = args.layers, args.draft_vocab_size
    if args.init_from:  # unset shape flags take the head's values; set ones are checked against it
        from .lineage import head_config

        src = head_config(args.init_from)
        layers = src.num_hidden_layers if layers is None else layers
        vocab = src.draft_vocab_size if vocab is None else vocab
    cfg = TrainConfig(
        mode=args.mode, num_depths=args.num_depths, layers=layers or 1,
        draft_vocab_size=(16384 if vocab is None else vocab) or None, steps=args.steps,
        time_budget_s=args.time_budget, autocast=args.autocast, freeze_lm_head=args.freeze_lm_head,
        init_from=args.init_from, snapshot_every_tokens=args.snapshot_every_tokens,
        schedule=args.schedule or ("time" if args.time_budget else "steps"), lr=args.lr,
        warmup_steps=args.warmup_steps, lm_head_lr_ratio=args.lm_head_lr_ratio, batch_tokens=args.batch_tokens,
        row_tokens=args.row_tokens,
        cod_ratio=args.cod_ratio, cod_min_ratio=args.cod_min_ratio, mask_hidden=args.mask_hidden,
        mask_embedding=args.mask_embedding, mask_token_id=args.mask_token_id, seed=args.seed,
        save_every=args.save_every, target=args.target or target_name())
    out = Path(args.out)
    state = Path(args.state_dir) if args.state_dir else out / "checkpoint"
    if not args.resume and not args.overwrite:  # before the model loads: never replace work silently
        if (out / "config.json").exists():
            raise PeagleError(f"{out} already holds a head. Fix: --resume to continue its training state, "
                              "--overwrite to replace it, or another --out.")
        if (state / STATE_FILE).exists():
            raise PeagleError(f"{state} already holds a training state. Fix: --resume to continue it, --overwrite "
                              "to start afresh over it, or another --out / --state-dir.")
    if args.resume and (state / STATE_FILE).exists():
        saved = torch.load(state / STATE_FILE, map_location="cpu", weights_only=False).get("config") or {}
        check_resume_config(saved, asdict(cfg), state / STATE_FILE)
    meta, records = read_distilled(args.data)
    records, held_out = select_split(records, args.split)
    model, tok, _ = load_cli_target(args)
    check_data_target(meta, model, args.data)
    records = records[: args.num_sequences]
    t0 = time.perf_counter()
    seqs = prepare_sequences(model, records, cfg.tap_layers, args.features, max_seq_len=cfg.max_seq_len)
    feature_s = time.perf_counter() - t0
    feature_tokens = sum(len(s["input_ids"]) for s in seqs)
    probe = precision_probe(cfg, model, seqs, tok) if args.probe_precision else None
    if probe:
        print(f"[train] tokens/s: float32 {probe['float32']}, bf16 autocast {probe['bfloat16']}")
    trainer = Trainer(cfg, model, seqs, tokenizer=tok, out_dir=args.out, state_dir=args.state_dir,
                      resume=args.resume, overwrite=args.overwrite)
    print(f"[train] {len(seqs)} sequences ({feature_tokens:,} tokens; {held_out} records of other splits left "
          f"out), features in {feature_s:.0f} s; autocast {trainer.autocast}; draft vocabulary {trainer.draft_ids.numel()} ids, coverage {trainer.coverage:.4f}; "
          f"mask token id {trainer.mask_token_id}")
    res = trainer.train()
    if not trainer.is_main:
        return
    record = dict(
        command="peagle-lab " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        config=asdict(cfg), mask_token_id=trainer.mask_token_id,
        data=dict(file=display_path(args.data), sequences=len(seqs), tokens=feature_tokens, split=args.split,
                  left_out=held_out, response_tokens=sum(len(s["input_ids"]) - s["prompt_len"] for s in seqs),
                  distill=dict((k, meta.get(k)) for k in ("target", "max_new_tokens", "decoding"))),
        features=dict(source=f"offline shards ({display_path(args.features)})" if args.features
                      else "online (target forward once, kept in memory)", seconds=round(feature_s, 1),
                      tokens_per_s=round(feature_tokens / max(feature_s, 1e-9), 1)),
        tokens_seen=res.info["tokens_seen"], tokens_per_s=res.info["tokens_per_s"], autocast=res.info["autocast"],
        precision_probe=probe,
        draft_vocab=dict(size=int(trainer.draft_ids.numel()), coverage=round(trainer.coverage, 5)),
        steps_done=res.steps_done, train_time_s=round(res.train_time_s, 1), feature_time_s=round(feature_s, 1),
        stopped_by=res.stopped_by, machine=machine_info(model), final_train_accuracy=final_accuracy(res.log),
        note=args.note, eval=None)
    if args.init_from:
        from .lineage import cumulative, history_of, summary

        record["history"] = history_of(args.init_from)
        record["warm_restart"] = ("weights, draft vocabulary and mask token from the --init-from head; optimizer "
                                  "moments and the lr schedule (with warm-up) start afresh")
        record["cumulative"] = cumulative(record["history"], summary(record, args.out))
    if args.eval_prompts or args.eval_val_prompts:
        from .prompts import humaneval_prompts

        from .prompts import load_scale_records

        ks = [int(k) for k in args.eval_ks.split(",")]
        # evaluate what ships: the saved (bf16) checkpoint, loaded as users load it
        head = PEagleDrafter.from_pretrained(args.out, target=model, device=next(model.parameters()).device,
                                             dtype=next(model.parameters()).dtype)
        sets = [("eval", humaneval_prompts(args.eval_prompts) if args.eval_prompts else None),
                ("eval_val", load_scale_records("val")[: args.eval_val_prompts] if args.eval_val_prompts else None)]
        for key, prompts in sets:
            if not prompts:
                continue
            t1 = time.perf_counter()
            record[key] = evaluate_head(model, tok, head, prompts, ks, max_new_tokens=args.eval_max_new_tokens)
            record[key]["wall_s"] = round(time.perf_counter() - t1, 1)
            record[key]["dtype"] = str(next(model.parameters()).dtype).replace("torch.", "")
            record[key]["prompt_set"] = "HumanEval" if key == "eval" else "held-out split of the scale mix"
            print(f"[{key}] acceptance length per K:", record[key]["acceptance_length"])
    write_training_record(args.out, record)
    print(f"[train] head and TRAINING.md written to {args.out}")
