"""The acceptance-aligned loss (``train --loss lk``): its value is the stated blend of cross-entropy and
acceptance probability, its weight moves from CE to acceptance as the depth learns, and an lk run learns."""

import torch
import torch.nn.functional as F

from peagle_lab.experiments.heldout import depth_accuracy
from peagle_lab.training import TrainConfig, prepare_sequences, train_head
from peagle_lab.training.objective import LK_ETA, lk_hybrid

MASK_ID = 3


def test_lk_is_the_blend_of_cross_entropy_and_acceptance_over_the_counted_rows():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 10, generator=gen, requires_grad=True)
    labels = torch.tensor([1, 2, 3, 4, 5, 6])
    valid = torch.tensor([True, True, False, True, True, True])
    ce = F.cross_entropy(logits, torch.where(valid, labels, -100), ignore_index=-100, reduction="none")
    loss = lk_hybrid(ce, valid, valid.sum())
    q = logits.softmax(-1)[torch.arange(6), labels][valid]
    accept = q.mean()
    lam = torch.exp(-LK_ETA * accept.detach())
    by_hand = lam * (-q.log()).mean() + (1 - lam) * (1 - accept.detach())
    assert torch.allclose(loss, by_hand.detach(), atol=1e-6)
    # lam is a constant of the step: the gradient is lam * dCE + (1 - lam) * d(1 - accept)
    loss.backward()
    ref = logits.detach().clone().requires_grad_(True)
    q_ref = ref.softmax(-1)[torch.arange(6), labels][valid]
    (float(lam) * (-q_ref.log()).mean() + (1 - float(lam)) * (1 - q_ref.mean())).backward()
    assert torch.allclose(logits.grad, ref.grad, atol=1e-6)
    assert logits.grad[2].abs().max() == 0, "a row that does not count gets no gradient"


def test_lk_weights_cross_entropy_less_as_acceptance_grows():
    labels = torch.zeros(4, dtype=torch.long)
    valid = torch.ones(4, dtype=torch.bool)
    weights = []
    for margin in (0.0, 2.0, 6.0):
        logits = torch.zeros(4, 8)
        logits[:, 0] = margin
        ce = F.cross_entropy(logits, labels, reduction="none")
        accept = float(torch.exp(-ce).mean())
        weights.append(float(torch.exp(torch.tensor(-LK_ETA * accept))))
        total = lk_hybrid(ce, valid, valid.sum())
        assert abs(float(total) - (weights[-1] * float(ce.mean()) + (1 - weights[-1]) * (1 - accept))) < 1e-6
    assert weights[0] > weights[1] > weights[2]


def test_lk_training_learns(tiny_llama):
    model = tiny_llama(hidden=32, layers=4)
    gen = torch.Generator().manual_seed(0)
    records = [{"input_ids": torch.randint(4, 96, (20 - i % 3,), generator=gen).tolist(), "prompt_len": 4}
               for i in range(2)]
    seqs = prepare_sequences(model, records, progress=False)
    cfg = TrainConfig(num_depths=3, layers=1, draft_vocab_size=None, steps=60, lr=5e-3, lm_head_lr_ratio=1.0,
                      warmup_steps=3, batch_tokens=40, row_tokens=40, mask_token_id=MASK_ID, save_every=0, seed=0,
                      autocast="float32", loss="lk")
    res = train_head(cfg, model, seqs, progress=False, verbose=False)
    first = sum(r["loss"] for r in res.log[:3]) / 3
    last = sum(r["loss"] for r in res.log[-3:]) / 3
    assert last < 0.5 * first, (first, last)
    assert depth_accuracy(res.head, seqs)["accuracy"][0] > 10 / 96, "ten times chance"
