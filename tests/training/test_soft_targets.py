"""Soft targets (``train --loss kl``): the soft cross-entropy is the KL to the target's top-k distribution over
the draft vocabulary up to a constant, positions whose target top-1 is outside the draft vocabulary are masked,
the top-k logits travel from the feature shards into training, and a kl run learns."""

import json

import pytest
import torch
import torch.nn.functional as F

from peagle_lab.errors import PeagleError
from peagle_lab.experiments.heldout import depth_accuracy
from peagle_lab.training import (TrainConfig, plan_row, prepare_sequences, soft_cross_entropy,
                                 train_head)

MASK_ID = 3


def _records(n=4, length=20, vocab=96, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(4, vocab, (length - i % 3,), generator=gen).tolist(), "prompt_len": 4}
            for i in range(n)]


def _cfg(**kw):
    base = dict(num_depths=3, layers=1, draft_vocab_size=None, steps=30, lr=5e-3, lm_head_lr_ratio=1.0,
                warmup_steps=3, batch_tokens=40, row_tokens=40, mask_token_id=MASK_ID, save_every=0, seed=0,
                autocast="float32")
    return TrainConfig(**(base | kw))


def test_soft_cross_entropy_is_the_kl_to_the_renormalised_top_k_plus_its_entropy():
    gen = torch.Generator().manual_seed(0)
    q_logits = torch.randn(5, 12, generator=gen)
    values = torch.randn(5, 4, generator=gen).sort(-1, descending=True).values
    ids = torch.stack([torch.randperm(12, generator=gen)[:4] for _ in range(5)])
    ids[1, 2] = -1  # outside the draft vocabulary: dropped, the rest renormalised
    p = torch.zeros(5, 12)
    for r in range(5):
        keep = ids[r] >= 0
        p[r, ids[r][keep]] = values[r][keep].softmax(-1)
    logq = q_logits.log_softmax(-1)
    kl = (p * (p.clamp_min(1e-30).log() - logq)).sum(-1).mean()
    entropy = -(p * p.clamp_min(1e-30).log()).sum(-1).mean()
    torch.testing.assert_close(soft_cross_entropy(q_logits, values, ids), kl + entropy)


def test_a_one_hot_target_makes_the_soft_loss_the_hard_cross_entropy():
    logits = torch.randn(3, 10)
    labels = torch.tensor([2, 7, 0])
    values = torch.tensor([[60.0, 0.0], [60.0, 0.0], [60.0, 0.0]])  # top-1 takes all the mass
    ids = torch.stack([labels, (labels + 1) % 10], 1)
    torch.testing.assert_close(soft_cross_entropy(logits, values, ids), F.cross_entropy(logits, labels))


def test_top_k_logits_travel_from_the_feature_cache_into_the_packed_row(tiny_llama, tmp_path):
    model = tiny_llama(hidden=32, layers=4)
    recs = _records()
    plain = prepare_sequences(model, recs, features_dir=tmp_path, progress=False)  # a part without logits
    assert "topk_values" not in plain[0]
    soft = prepare_sequences(model, recs, features_dir=tmp_path, progress=False, topk=5)
    parts = sorted(tmp_path.glob("part-*"))
    assert len(parts) == 2, "a part without top-k logits cannot serve --loss kl: a new part is extracted"
    man = [json.loads((p / "manifest.json").read_text()) for p in parts]
    assert sorted(m["topk"] for m in man) == [0, 5]
    assert {m["topk_bytes_per_token"] for m in man} == {0, 40}
    fewer = prepare_sequences(model, recs, features_dir=tmp_path, progress=False, topk=3)  # read from the k=5 part
    assert len(sorted(tmp_path.glob("part-*"))) == 2
    for s, f in zip(soft, fewer):
        assert s["topk_values"].shape == (len(s["input_ids"]), 5)
        assert torch.equal(s["topk_indices"][:, 0], s["labels"])  # top-1 is the greedy label
        assert torch.equal(f["topk_indices"], s["topk_indices"][:, :3])
    plan = plan_row(soft[:2], 3)
    assert plan.topk_values.shape == (len(plan.y), 5) and torch.equal(plan.topk_indices[:, 0], plan.y)


def test_kl_training_learns_and_refuses_sequences_without_logits(tiny_llama):
    model = tiny_llama(hidden=32, layers=4)
    seqs = prepare_sequences(model, _records(n=2), progress=False, topk=8)
    res = train_head(_cfg(loss="kl", topk_logits=8, steps=60), model, seqs, progress=False, verbose=False)
    # the soft loss cannot fall below the entropy of the target's top-8 distribution: compare the gap above it
    p = torch.cat([s["topk_values"][1:] for s in seqs]).softmax(-1)
    floor = float(-(p * p.log()).sum(-1).mean())
    first = sum(r["loss"] for r in res.log[:3]) / 3
    last = sum(r["loss"] for r in res.log[-3:]) / 3
    assert last - floor < 0.5 * (first - floor), (first, last, floor)
    acc = depth_accuracy(res.head, seqs)
    # anchors: the last prompt position and every response position before the last token
    assert acc["elements"][0] == sum(len(s["input_ids"]) - s["prompt_len"] for s in seqs)
    assert acc["accuracy"][0] > 10 / 96, "ten times chance: the soft targets taught the greedy token"
    hard = prepare_sequences(model, _records(n=2), progress=False)
    with pytest.raises(PeagleError, match="top-k logits"):
        train_head(_cfg(loss="kl", steps=1), model, hard, progress=False, verbose=False)
    with pytest.raises(PeagleError, match="loss"):
        _cfg(loss="mse")


def test_held_out_accuracy_leaves_the_callers_head_alone(tiny_llama):
    model = tiny_llama(hidden=32, layers=4)
    seqs = prepare_sequences(model, _records(n=2), progress=False)
    res = train_head(_cfg(steps=4), model, seqs, progress=False, verbose=False)
    head = res.head.to(torch.bfloat16)
    before = {k: v.clone() for k, v in head.state_dict().items()}
    acc = depth_accuracy(head, seqs, num_depths=3)
    assert len(acc["accuracy"]) == 3 and acc["elements"][0] > acc["elements"][2] > 0
    assert next(head.parameters()).dtype == torch.bfloat16
    assert all(torch.equal(v, head.state_dict()[k]) for k, v in before.items())
