"""The position-indexed KV caches: same logits as transformers' DynamicCache, rollback by length, buffers
written in place (no reallocation across rounds once big enough), growth by doubling, autograd kept for training."""

import torch
from transformers import DynamicCache

from peagle_lab.decoding.draft_sources import HeadDrafter
from peagle_lab.kv_cache import DrafterCache, PositionBuffer, PositionCache
from peagle_lab.decoding.speculative import iter_rounds, plain_generate
from peagle_lab.decoding.target_runner import TargetRunner

from conftest import make_random_head, make_random_ids, make_tiny_llama

# prefill, verifications of K+1 tokens, rollbacks to the accepted length: what the loop does to the target cache
SCRIPT = [("forward", 7), ("forward", 5), ("crop", 9), ("forward", 4), ("crop", 13), ("forward", 1),
          ("forward", 6), ("crop", 15), ("forward", 3)]


def _play(runner, ids, dynamic: bool):
    runner.reset()
    if dynamic:
        runner.cache = DynamicCache(config=runner.model.config)
    outs, used = [], 0
    for op, n in SCRIPT:
        if op == "crop":
            runner.crop(n)
            used = n
        else:
            logits, taps = runner.forward(ids[used:used + n])
            used += n
            outs.append((logits, taps))
    return outs


def test_target_logits_and_taps_equal_the_dynamic_cache_path():
    model = make_tiny_llama(seed=3, layers=3)
    ids = make_random_ids(length=40, seed=1)[0].tolist()
    runner = TargetRunner(model)
    new = _play(runner, ids, dynamic=False)
    assert isinstance(runner.cache, PositionCache)
    ref = _play(TargetRunner(model), ids, dynamic=True)
    for (l1, t1), (l2, t2) in zip(new, ref):
        torch.testing.assert_close(l1, l2, rtol=0, atol=1e-6)
        torch.testing.assert_close(t1, t2, rtol=0, atol=1e-6)


def test_target_and_drafter_buffers_are_not_reallocated_across_rounds():
    target = make_tiny_llama(seed=1)
    drafter = HeadDrafter(make_random_head(target, layers=2, k=4))
    runner = TargetRunner(target)
    prompt = make_random_ids(length=8, seed=2)[0].tolist()
    seen = []
    for rnd in iter_rounds(runner, drafter, prompt, 4, 40):
        target_ptrs = [(b.k.data_ptr(), b.v.data_ptr()) for b in runner.cache.buffers()]
        drafter_ptrs = [(b.k.data_ptr(), b.v.data_ptr()) for b in drafter.cache.layers if b.k is not None]
        seen.append((target_ptrs, drafter_ptrs))
        assert all(b.length == runner.length for b in runner.cache.buffers())  # rollback = the length
    assert len(seen) > 5
    assert all(s[0] == seen[0][0] for s in seen)  # the target's buffers: written in place every round
    assert all(s[1] == seen[1][1] for s in seen[1:])  # the drafter's, from its first round on
    # and the next generation reuses the target's buffers
    plain_generate(runner, prompt, 10)
    assert [(b.k.data_ptr(), b.v.data_ptr()) for b in runner.cache.buffers()] == seen[0][0]


def test_a_buffer_grows_by_doubling_keeps_its_contents_and_rolls_back_by_length():
    buf = PositionBuffer(min_capacity=4)
    x = torch.randn(1, 2, 20, 3)
    k, _ = buf.write(x[:, :, :3], x[:, :, :3])
    assert buf.capacity == 4 and k.shape[2] == 3
    ptr = buf.k.data_ptr()
    buf.truncate(2)
    k, _ = buf.write(x[:, :, 2:4], x[:, :, 2:4])  # fits: written in place
    assert buf.k.data_ptr() == ptr and k.shape[2] == 4
    k, v = buf.write(x[:, :, 4:13], x[:, :, 4:13])  # 13 > 4: 4 -> 8 -> 16
    assert buf.capacity == 16 and buf.length == 13
    assert torch.equal(k, x[:, :, :13]) and torch.equal(v, x[:, :, :13])
    assert k.data_ptr() == buf.k.data_ptr()  # a view of the buffer, not a copy


def test_drafter_cache_in_pieces_with_a_rollback_equals_one_pass():
    target = make_tiny_llama()
    head = make_random_head(target, layers=2)
    T, H = 11, target.config.hidden_size
    ids, hidden, pos = torch.randint(0, 96, (1, T)), torch.randn(1, T, H), torch.arange(T)[None]
    with torch.no_grad():
        full, _ = head(ids, hidden, pos)
        cache = head.new_cache()
        assert isinstance(cache, DrafterCache)
        head(ids[:, :4], hidden[:, :4], pos[:, :4], cache=cache)
        head(torch.zeros_like(ids[:, 4:9]), torch.randn(1, 5, H), pos[:, 4:9], cache=cache)  # speculative slots
        cache.crop(4)  # rejected: roll back
        assert len(cache) == 4
        rest, _ = head(ids[:, 4:], hidden[:, 4:], pos[:, 4:], cache=cache)
    torch.testing.assert_close(rest, full[:, 4:], rtol=0, atol=1e-6)


def test_drafter_cache_keeps_gradients_flowing_for_training():
    target = make_tiny_llama()
    head = make_random_head(target, layers=2).train()
    T, H = 6, target.config.hidden_size
    ids, hidden, pos = torch.randint(0, 96, (1, T)), torch.randn(1, T, H), torch.arange(T)[None]
    weight = head.midlayer.self_attn.k_proj.weight
    full, _ = head(ids, hidden, pos)
    (ref,) = torch.autograd.grad(full.square().sum(), weight)
    cache = head.new_cache()
    a, _ = head(ids[:, :3], hidden[:, :3], pos[:, :3], cache=cache)
    b, _ = head(ids[:, 3:], hidden[:, 3:], pos[:, 3:], cache=cache)  # attends to the first depth's keys
    (got,) = torch.autograd.grad(a.square().sum() + b.square().sum(), weight)  # nothing saved was overwritten
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
