"""The training objective: :class:`DraftTrainer`, a drafter head with its training reparametrisation and loss.

The elements are computed depth by depth through ONE :class:`~peagle_lab.drafter.DrafterCache` (its ``update``
concatenates the keys/values of earlier depths, gradients flow through them), with an explicit boolean mask per
depth (:func:`~peagle_lab.training.mask.training_mask`). Loss: cross-entropy of the draft-vocabulary logits against
``y`` mapped into the draft vocabulary (labels outside it are masked), averaged per depth, every depth weighted
equally; per-depth top-1 accuracy is logged (a label outside the draft vocabulary counts as a miss: that is what
acceptance will see). With ``loss="kl"`` (``--loss kl``) the hard label gives way to the target's distribution:
:func:`soft_cross_entropy` against its top-k logits restricted to the draft vocabulary, on the same positions;
with ``loss="lk"`` (``--loss lk``) the greedy label's cross-entropy is blended with the acceptance probability
(:func:`lk_hybrid`).

Trainable: ``fc``, ``mask_hidden`` (variant ``learned``), the decoder layers, ``norm``, ``lm_head`` (started from
the target's), and the mask token's embedding row only (variant ``learned``; every other row stays the target's,
so the checkpoint keeps ``embed_shared_with_target`` and stores one row). The row is its own parameter here
(the same as a gradient hook zeroing the other rows of the embedding, without a dense 49k x H gradient and
optimizer state every step).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..drafter import PEagleDrafter
from ..errors import PeagleError
from ..drafter.vocab import target_to_draft_index
from .elements import RowPlan
from .mask import training_mask


# The start of mask_hidden is drawn from its own generator seeded with ``seed + MASK_HIDDEN_SEED_OFFSET``: it
# depends on the run's seed only, so two heads of one run setting start alike whatever their mask token id. The
# offset (16, SmolLM2's mask token id) is the one the shipped heads were trained with, so a seed-0 run on the
# embedded target reproduces their starting point.
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
                 tap_scale: torch.Tensor | None = None, seed: int = 0, loss: str = "ce"):
        super().__init__()
        self.head, self.mode, self.loss_kind = head, mode, loss
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
        """Logits and prenorm states of every element, depth by depth: lists of (Q_d, Vd) and (Q_d, H). The plan
        is copied to the head's device once; each depth's mask is built there (no host round trip per depth)."""
        head, cfg = self.head, self.head.config
        dev = self.mask_embedding.device
        plan = plan.to(dev)
        x, dtype = plan.x, self.fc_weight.dtype
        cache = head.new_cache()
        fused0 = self.fuse(plan.taps.to(dtype))
        logits_all, pre_all = [], []
        for d, el in enumerate(plan.depths):
            pos = el.pos
            if d == 0:
                ids, hidden = x[el.flat], fused0
            elif self.mode == "sequential":
                ids, hidden = x[el.flat], pre_all[-1][el.parent]
            else:
                ids = torch.full_like(pos, cfg.mask_token_id)
                if self.mask_hidden_variant == "context":
                    hidden = fused0[el.g]
                else:
                    hidden = self.mask_slot_hidden().to(dtype).reshape(1, -1).expand(len(pos), -1)
            mask = training_mask(plan.depths, d)[None, None]
            logits, pre = head(ids[None], hidden[None], pos[None], cache=cache, attn_mask=mask,
                               input_embeds=self._embed(ids)[None])
            logits_all.append(logits[0])
            pre_all.append(pre[0])
        return logits_all, pre_all

    def forward(self, plan: RowPlan):
        """The loss (mean over depths of each depth's cross-entropy over its trained, in-vocabulary labels: against
        the greedy label, or with ``loss="kl"`` against the target's top-k distribution, :func:`soft_cross_entropy`)
        and per depth ``{n, correct, loss_sum}``. Labels outside the draft vocabulary are ignored (``ignore_index``
        / a zero weight), not selected by boolean indexing, so no depth waits on the host; the metrics come back in
        one transfer."""
        if self.loss_kind == "kl" and plan.topk_values is None:
            raise PeagleError("--loss kl needs the target's top-k logits in every training sequence. Fix: prepare "
                              "the sequences with topk=K (the train command does), or --loss ce.")
        dev = self.mask_embedding.device
        plan = plan.to(dev)
        logits_all, _ = self.run_depths(plan)
        d2t_ids = self.head.draft_to_target_ids()
        depth_losses, stats = [], []
        for el, logits in zip(plan.depths, logits_all):
            keep = el.loss
            labels = plan.y[el.flat]
            draft_labels = self.t2d_index[labels]
            valid = keep & (draft_labels >= 0)
            n_valid = valid.sum()
            if self.loss_kind == "kl":
                soft = soft_cross_entropy(logits, plan.topk_values[el.flat], self.t2d_index[plan.topk_indices[el.flat]],
                                          reduction="none")
                loss = torch.where(valid, soft, 0.0).sum() / n_valid.clamp(min=1)
            else:
                ce = F.cross_entropy(logits.float(), torch.where(valid, draft_labels, -100), ignore_index=-100,
                                     reduction="none")
                loss = lk_hybrid(ce, valid, n_valid) if self.loss_kind == "lk" else ce.sum() / n_valid.clamp(min=1)
            depth_losses.append(loss)
            with torch.no_grad():
                n = keep.sum()
                correct = ((d2t_ids[logits.argmax(-1)] == labels) & keep).sum()
                stats.append(torch.stack([n.float(), correct.float(), loss.detach().float() * n, n_valid.float()]))
        numbers = torch.stack(stats).tolist()  # the step's one wait on the device
        metrics = [dict(n=int(n), correct=int(c), loss_sum=float(ls)) for n, c, ls, _ in numbers]
        losses = [loss for loss, row in zip(depth_losses, numbers) if row[3] > 0]
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


# lk's weight on the cross-entropy: exp(-LK_ETA * mean acceptance probability) (0.74 at 0.1, 0.26 at 0.45)
LK_ETA = 3.0


def lk_hybrid(ce_rows, valid, n_valid):
    """The acceptance-aligned loss of one depth (``--loss lk``), from its per-row cross-entropies against the greedy
    labels (0 on rows that do not count). ``q(y) = exp(-ce)`` is the chance that a token drawn from the head is the
    target's greedy token, i.e. is accepted: the loss is ``lam * CE + (1 - lam) * (1 - mean q(y))`` with ``lam =
    exp(-LK_ETA * mean q(y))`` taken as a constant. CE's gradient is large where q(y) is near 0 (tokens the head
    cannot yet predict); the acceptance term's is largest where q(y) is middling (tokens it nearly has), so as the
    depth learns the weight moves to the tokens that would turn into accepted drafts."""
    n = n_valid.clamp(min=1)
    ce = ce_rows.sum() / n
    accept = torch.where(valid, torch.exp(-ce_rows), 0.0).sum() / n
    lam = torch.exp(-LK_ETA * accept.detach())
    return lam * ce + (1 - lam) * (1 - accept)


def soft_cross_entropy(draft_logits, topk_values, topk_draft_ids, reduction: str = "mean"):
    """Mean over rows of ``-sum_v p(v) log q(v)``: ``q`` the head's softmax over the draft vocabulary, ``p`` the
    target's softmax over its top-k logits restricted to the draft vocabulary (ids mapped to draft ids, -1 where
    outside it; the target's mass outside its top k is taken as zero). It differs from KL(p || q) by p's entropy,
    a constant of the data, so its gradient is the KL's (EAGLE-3's and SpecForge's objective). Rows whose target
    top-1 lies outside the draft vocabulary are the caller's to drop (as SpecForge masks them); ``reduction="none"``
    gives one value per row for that."""
    inside = topk_draft_ids >= 0
    p = topk_values.float().masked_fill(~inside, float("-inf")).softmax(-1)
    logq = draft_logits.float().log_softmax(-1).gather(-1, topk_draft_ids.clamp_min(0))
    rows = -(p * logq.masked_fill(~inside, 0.0)).sum(-1)
    return rows if reduction == "none" else rows.mean()


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
