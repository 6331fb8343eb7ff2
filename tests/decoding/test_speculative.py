"""The speculative loop: greedy output equals plain greedy (every K, both modes, both edges of acceptance),
sampling preserves the target's distribution (chi-square), and bad input fails clearly."""

import itertools
import json

import pytest
import torch
from hypothesis import given, HealthCheck, settings, strategies as st
from scipy.stats import chisquare

from peagle_lab.decoding import sampling as sampling_rules, speculative as spec
from peagle_lab.decoding.draft_sources import (DraftSource, HeadDrafter, OracleDrafter, PromptLookupDrafter,
                                              RandomDrafter, lookup_drafts)
from peagle_lab.errors import PeagleError
from peagle_lab.decoding.sampling import Sampling
from peagle_lab.decoding.speculative import plain_generate, speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner

from conftest import make_random_head, make_random_ids, make_tiny_llama


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), prompt_len=st.integers(1, 12), k=st.integers(1, 8),
       mode=st.sampled_from(["parallel", "sequential"]), kind=st.sampled_from(["head", "oracle", "random", "lookup"]),
       layers=st.integers(1, 2), draft_vocab=st.sampled_from([None, 40]))
def test_greedy_speculative_output_equals_plain_greedy(seed, prompt_len, k, mode, kind, layers, draft_vocab):
    target = make_tiny_llama(seed=seed % 7, layers=2 + seed % 3)
    runner = TargetRunner(target)
    prompt = make_random_ids(length=prompt_len, seed=seed)[0].tolist()
    base = plain_generate(runner, prompt, 24)
    if kind == "head":
        drafter = HeadDrafter(make_random_head(target, mode, seed, layers, draft_vocab))
    elif kind == "oracle":
        drafter = OracleDrafter(prompt + base.tokens, target.config.vocab_size)
    elif kind == "lookup":
        drafter = PromptLookupDrafter(target.config.vocab_size, max_ngram=1 + seed % 3)
    else:
        drafter = RandomDrafter(target.config.vocab_size, seed)
    res = speculative_generate(runner, drafter, prompt, k, 24)
    assert res.tokens == base.tokens
    stats = res.stats
    assert stats.new_tokens == 24 and 1.0 <= stats.acceptance_length <= k + 1
    assert stats.target_forwards == stats.rounds + 1  # one prefill + one verification per round


@pytest.mark.parametrize("k", range(1, 9))
def test_oracle_head_is_accepted_in_full_every_round(k):
    target = make_tiny_llama(seed=1)
    runner = TargetRunner(target)
    prompt = make_random_ids(length=6, seed=k)[0].tolist()
    n = 1 + 4 * (k + 1)  # the first token from the prefill, then 4 full rounds
    base = plain_generate(runner, prompt, n)
    res = speculative_generate(runner, OracleDrafter(prompt + base.tokens, 96), prompt, k, n)
    assert res.tokens == base.tokens
    assert res.stats.rounds == 4 and res.stats.acceptance_length == k + 1
    assert res.stats.conditional_acceptance == res.stats.unconditional_acceptance == [1.0] * k


def test_random_drafts_are_almost_never_accepted_but_output_is_unchanged():
    target = make_tiny_llama(seed=2)
    runner = TargetRunner(target)
    prompt = make_random_ids(length=5, seed=3)[0].tolist()
    base = plain_generate(runner, prompt, 40)
    res = speculative_generate(runner, RandomDrafter(96, seed=0), prompt, 4, 40)
    assert res.tokens == base.tokens
    assert res.stats.acceptance_length < 1.2


def test_prompt_lookup_copies_what_followed_the_latest_earlier_match():
    assert lookup_drafts([1, 2, 3, 9, 1, 2, 3, 4, 1, 2], 3) == [3, 4, 1]  # [4, 1, 2] never seen; [1, 2] at 4 (latest)
    assert lookup_drafts([7, 1, 2, 3, 1, 2, 3], 2) == [1, 2]  # the 3-gram [1, 2, 3] first: what followed it at 1
    assert lookup_drafts([5, 6, 5], 3) == [6, 5, 5]  # the copy runs out: padded with its last token
    assert lookup_drafts([1, 2, 3], 2) == [3, 3]  # no match at all: the last token, k times
    assert lookup_drafts([4, 4], 1, max_ngram=3) == [4]
    with pytest.raises(PeagleError, match="max_ngram"):
        PromptLookupDrafter(96, max_ngram=0)


def test_prompt_lookup_sees_the_shifted_sequence_and_costs_no_pass():
    target = make_tiny_llama(seed=3)
    runner = TargetRunner(target)
    prompt = make_random_ids(length=8, seed=4)[0].tolist()
    drafter = PromptLookupDrafter(96)
    res = speculative_generate(runner, drafter, prompt, 3, 30)
    seq = prompt + res.tokens
    assert res.tokens == plain_generate(runner, prompt, 30).tokens
    assert len(drafter.context) >= len(prompt) and drafter.context == seq[1:len(drafter.context) + 1]
    assert res.stats.drafter_passes == 0
    drafter.reset()
    assert drafter.context == []


def test_eos_stops_generation_in_the_middle_of_an_accepted_run():
    target = make_tiny_llama(seed=4)
    runner = TargetRunner(target)
    prompt = make_random_ids(length=5, seed=5)[0].tolist()
    base = plain_generate(runner, prompt, 30)
    eos = base.tokens[7]
    cut = base.tokens[: base.tokens.index(eos) + 1]
    assert plain_generate(runner, prompt, 30, eos_ids=eos).tokens == cut
    res = speculative_generate(runner, OracleDrafter(prompt + base.tokens, 96), prompt, 6, 30, eos_ids=eos)
    assert res.tokens == cut


# ------------------------------------------------------------------------------------ sampling
class SkewedDrafter(DraftSource):
    """Samples drafts from a fixed distribution far from the target's, so rejections are frequent."""

    def __init__(self, vocab, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.q = torch.softmax(3.0 * torch.randn(16, vocab, generator=g), -1)

    def propose(self, slots, k, sampling, gen):
        q = self.q[:k]
        return torch.multinomial(q, 1, generator=gen).squeeze(-1), q


def exact_two_token_distribution(target, prompt, sampling):
    """P(t1, t2) under the target, enumerated exactly."""
    with torch.no_grad():
        logits = target(torch.tensor([prompt])).logits[0, -1]
        p1 = sampling.probs(logits)
        V = p1.shape[0]
        seqs = torch.tensor([prompt + [t] for t in range(V)])
        p2 = sampling.probs(target(seqs).logits[:, -1])  # (V, V): row t1
    return (p1[:, None] * p2).flatten()


def sample_two_tokens(target, drafter_factory, prompt, sampling, n, k, seed=0):
    runner = TargetRunner(target)
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(target.config.vocab_size ** 2)
    for _ in range(n):
        toks = speculative_generate(runner, drafter_factory(), prompt, k, 2, sampling=sampling, gen=gen).tokens
        counts[toks[0] * target.config.vocab_size + toks[1]] += 1
    return counts


def chi_square_pvalue(counts, probs, min_expected=5.0):
    """Pearson chi-square, pooling cells with small expected counts into one."""
    n = counts.sum()
    expected = probs * n
    big = expected >= min_expected
    obs = torch.cat([counts[big], counts[~big].sum().view(1)])
    exp = torch.cat([expected[big], expected[~big].sum().view(1)])
    keep = exp > 0
    return chisquare(obs[keep].numpy(), exp[keep].numpy() * obs[keep].sum().item() / exp[keep].sum().item()).pvalue


SAMPLING_CASES = [
    ("skewed-k1", lambda V: SkewedDrafter(V), 1, Sampling(1.0)),
    ("skewed-k3-topp", lambda V: SkewedDrafter(V, 1), 3, Sampling(0.8, top_p=0.9)),
    ("random-head-parallel", None, 2, Sampling(1.0)),
    ("prompt-lookup-k2", lambda V: PromptLookupDrafter(V), 2, Sampling(1.0)),
]


@pytest.mark.parametrize("name,factory,k,sampling", SAMPLING_CASES, ids=[c[0] for c in SAMPLING_CASES])
def test_speculative_sampling_preserves_the_target_distribution(name, factory, k, sampling):
    target = make_tiny_llama(vocab=12, hidden=16, heads=2, kv_heads=1, layers=2, seed=5)
    with torch.no_grad():  # sharpen the tiny target a little so its distribution is far from uniform
        target.lm_head.weight.mul_(8.0)
    prompt = [4, 7, 9]
    if factory is None:
        head = make_random_head(target, "parallel", seed=3)
        with torch.no_grad():
            head.lm_head.weight.mul_(40.0)  # a confident but wrong head
        drafter_factory = lambda: HeadDrafter(head)  # noqa: E731
    else:
        drafter_factory = lambda: factory(12)  # noqa: E731
    probs = exact_two_token_distribution(target, prompt, sampling)
    counts = sample_two_tokens(target, drafter_factory, prompt, sampling, n=3000, k=k)
    assert chi_square_pvalue(counts, probs) > 1e-3


def test_the_chi_square_check_catches_a_wrong_acceptance_rule(monkeypatch):
    """Power check: accepting every draft (no min(1, p/q) test) must be detected."""
    target = make_tiny_llama(vocab=12, hidden=16, heads=2, kv_heads=1, layers=2, seed=5)
    with torch.no_grad():
        target.lm_head.weight.mul_(8.0)
    prompt, sampling = [4, 7, 9], Sampling(1.0)

    def accept_all(drafts, q, logits, sampling, gen):  # wrong: keeps every draft, bonus from p_{K+1}
        return drafts.shape[0], int(torch.multinomial(sampling.probs(logits[-1]), 1, generator=gen))

    monkeypatch.setattr(spec, "accept_sampling", accept_all)
    counts = sample_two_tokens(target, lambda: SkewedDrafter(12), prompt, sampling, n=3000, k=1)
    assert chi_square_pvalue(counts, exact_two_token_distribution(target, prompt, sampling)) < 1e-6


# ------------------------------------------------------------------------------------ bad input
def test_bad_inputs_fail_with_a_clear_message():
    target = make_tiny_llama()
    runner = TargetRunner(target)
    head = make_random_head(target, "parallel")
    with pytest.raises(PeagleError, match=r"K \(num_speculative_tokens\) must be an integer 1..64"):
        speculative_generate(runner, HeadDrafter(head), [5, 6], 0, 4)
    with pytest.raises(PeagleError, match="prompt is empty"):
        speculative_generate(runner, HeadDrafter(head), [], 2, 4)
    with pytest.raises(PeagleError, match="taps"):
        speculative_generate(TargetRunner(target, tap_layers=(0, 1, 2)), HeadDrafter(head), [5, 6], 2, 4)
    other = make_random_head(make_tiny_llama(vocab=128), "parallel")
    with pytest.raises(PeagleError, match="vocabulary"):
        speculative_generate(runner, HeadDrafter(other), [5, 6], 2, 4)
    with pytest.raises(PeagleError, match="mode"):
        HeadDrafter(head, "diagonal")


def test_k_above_the_trained_depth_is_noted_and_still_runs_losslessly():
    target = make_tiny_llama()
    runner = TargetRunner(target)
    head = make_random_head(target, "parallel")
    prompt = [5, 6, 7]
    base = plain_generate(runner, prompt, 12)
    drafter = HeadDrafter(head)
    assert any("trained for" in n for n in drafter.notes(10))
    res = speculative_generate(runner, drafter, prompt, 10, 12)
    assert res.tokens == base.tokens


# ------------------------------------------------------------------------------------ real target
def test_real_target_every_k_both_modes_on_humaneval_prompts(smollm2):
    """SmolLM2-135M, greedy, fp32: speculative == plain, token for token, K = 1..8, parallel and sequential."""
    from peagle_lab.drafter.heads import load_head, SHIPPED
    from peagle_lab.prompts import chat_ids, humaneval_prompts

    model, tok = smollm2
    heads = {}
    for mode in ("parallel", "sequential"):
        if SHIPPED[mode].exists():
            heads[mode] = load_head(mode, model)
        else:
            heads[mode] = make_random_head(model, mode, mask_token=16)
    runner = TargetRunner(model, heads["parallel"].config.aux_hidden_state_layer_ids)
    for text in humaneval_prompts(2):
        prompt = chat_ids(tok, text)
        base = plain_generate(runner, prompt, 20, eos_ids=tok.eos_token_id)
        for mode, k in itertools.product(("parallel", "sequential"), range(1, 9)):
            res = speculative_generate(runner, HeadDrafter(heads[mode], mode), prompt, k, 20,
                                       eos_ids=tok.eos_token_id)
            assert res.tokens == base.tokens, (mode, k, text[:40])


def test_cli_generate_check_json_on_a_local_tiny_target(tmp_path, tiny_llama, byte_tokenizer, capsys):
    """`peagle-lab generate --check --json`: strict JSON (never-reached slots are null), lossless, exit code 0."""
    from peagle_lab.bench import fresh_head
    from peagle_lab.cli import main

    model = tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=len(byte_tokenizer), max_positions=4096)
    model.config.eos_token_id = byte_tokenizer.eos_token_id
    model.save_pretrained(tmp_path / "target")
    byte_tokenizer.save_pretrained(tmp_path / "target")
    fresh_head(model, mode="parallel", mask_token_id=3).save_pretrained(tmp_path / "head", dtype=torch.float32)
    rc = main(["generate", "Hello there", "--target", str(tmp_path / "target"), "--head", str(tmp_path / "head"),
               "-k", "3", "--max-new-tokens", "8", "--check", "--json", "--threads", "1", "--device", "cpu"])
    report = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert rc == 0
    assert report["identical_to_plain_greedy"] is True
    assert report["k"] == 3 and 1 <= report["new_tokens"] <= 8  # a random tiny target may say EOS early
    assert len(report["per_position_acceptance"]) == 3
    assert all(x is None or 0.0 <= x <= 1.0 for x in report["per_position_acceptance"])


# ------------------------------------------------------------------------------------ devices (no GPU needed)
def _old_accept_sampling(drafts, draft_probs, target_logits, sampling, gen):
    """The acceptance rule as it was before it stayed on the logits' device (every tensor copied to the CPU):
    the reference for 'same seed, same tokens on the CPU'."""
    p = sampling.probs(target_logits).cpu()
    q = draft_probs.cpu().float()
    drafts = drafts.cpu()
    k = drafts.shape[0]
    for j in range(k):
        d = int(drafts[j])
        pd, qd = float(p[j, d]), float(q[j, d])
        u = float(torch.rand((), generator=gen))
        if qd > 0 and u < min(1.0, pd / qd):
            continue
        residual = (p[j] - q[j]).clamp_min(0)
        if float(residual.sum()) <= 0:
            residual = p[j]
        return j, int(torch.multinomial(residual / residual.sum(), 1, generator=gen).squeeze(-1))
    return k, int(torch.multinomial(p[k], 1, generator=gen).squeeze(-1))


def _no_cpu_copies(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("the acceptance maths copied a tensor to the CPU (Tensor.cpu())")

    monkeypatch.setattr(torch.Tensor, "cpu", refuse)


def test_generator_is_made_on_the_runners_device_and_a_foreign_one_is_refused():
    # a CPU generator for CUDA tensors: torch.multinomial would fail deep inside the loop; it is refused up front
    cuda_runner = TargetRunner(make_tiny_llama())
    cuda_runner.device = torch.device("cuda", 0)  # what a CUDA target looks like to the loop
    with pytest.raises(PeagleError, match="generator is on cpu"):
        speculative_generate(cuda_runner, RandomDrafter(96), [5, 6, 7], 2, 4, sampling=Sampling(1.0),
                             gen=torch.Generator())
    with pytest.raises(PeagleError, match="generator is on cpu"):
        plain_generate(cuda_runner, [5, 6, 7], 4, sampling=Sampling(1.0), gen=torch.Generator())
    with pytest.raises(PeagleError, match="make_generator"):
        spec.check_generator(torch.Generator(), torch.device("cuda", 0))
    spec.check_generator(None, "cuda")  # no generator: torch's default one on each device
    # the helper makes it on the runner's device; on the CPU it is the generator seeded as before (same draws)
    runner = TargetRunner(make_tiny_llama())
    gen = sampling_rules.make_generator(runner.device, 7)
    assert gen.device == runner.device == torch.device("cpu")
    assert torch.equal(torch.rand(5, generator=gen), torch.rand(5, generator=torch.Generator().manual_seed(7)))
    spec.check_generator(gen, runner.device)


def test_acceptance_maths_stays_on_the_logits_device(monkeypatch):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 12, generator=g)
    pred = logits.argmax(-1)
    drafts = pred[:3].clone()
    drafts[2] = (drafts[2] + 1) % 12  # the third draft is wrong
    q = torch.softmax(torch.randn(3, 12, generator=g), -1)
    _no_cpu_copies(monkeypatch)
    a, bonus = spec.accept_greedy(drafts, logits)
    assert (a, bonus) == (2, int(pred[2])) and type(a) is int and type(bonus) is int
    a, tok = spec.accept_sampling(drafts, q, logits, Sampling(1.0), sampling_rules.make_generator("cpu", 1))
    assert type(a) is int and type(tok) is int and 0 <= a <= 3 and 0 <= tok < 12
    # and a whole sampled generation with a head: drafting, acceptance and the bonus token, no CPU copies
    target = make_tiny_llama()
    runner = TargetRunner(target)
    res = speculative_generate(runner, HeadDrafter(make_random_head(target, "parallel")), [5, 6, 7], 3, 10,
                               sampling=Sampling(1.0), gen=sampling_rules.make_generator(runner.device, 0))
    assert len(res.tokens) == 10


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 6), temperature=st.sampled_from([0.5, 1.0, 2.0]),
       top_p=st.sampled_from([1.0, 0.8]), agree=st.floats(0.0, 1.0))
def test_seeded_cpu_sampling_acceptance_is_unchanged(seed, k, temperature, top_p, agree):
    """Same tokens and the same generator state afterwards as the former CPU-copying rule, draw for draw."""
    g = torch.Generator().manual_seed(seed)
    V = 10
    logits = 3.0 * torch.randn(k + 1, V, generator=g)
    sampling = Sampling(temperature, top_p)
    p = sampling.probs(logits)[:k]
    q = agree * p + (1 - agree) * torch.softmax(3.0 * torch.randn(k, V, generator=g), -1)  # from = p to far
    drafts = torch.multinomial(q, 1, generator=g).squeeze(-1)
    new, old = torch.Generator().manual_seed(seed + 1), torch.Generator().manual_seed(seed + 1)
    assert spec.accept_sampling(drafts, q, logits, sampling, new) == _old_accept_sampling(drafts, q, logits,
                                                                                          sampling, old)
    assert torch.equal(new.get_state(), old.get_state())


# ------------------------------------------------------------------------------------ rounds, slots, statistics
def test_iter_rounds_yields_the_prefill_then_one_record_per_verification():
    from peagle_lab.decoding.speculative import iter_rounds, Round, SpecStats

    target = make_tiny_llama(seed=3)
    runner = TargetRunner(target)
    prompt = make_random_ids(length=5, seed=4)[0].tolist()
    drafter = HeadDrafter(make_random_head(target, "sequential", seed=1))
    rounds = list(iter_rounds(runner, drafter, prompt, 3, 17))
    res = speculative_generate(runner, drafter, prompt, 3, 17)
    assert all(isinstance(r, Round) for r in rounds)
    assert rounds[0].is_prefill and rounds[0].drafts == [] and rounds[0].tokens == [rounds[0].bonus]
    assert set(rounds[0].times) == {"prefill"}
    assert [r.done for r in rounds] == [False] * (len(rounds) - 1) + [True]
    assert [t for r in rounds for t in r.tokens] == res.tokens == plain_generate(runner, prompt, 17).tokens
    for r in rounds[1:]:
        assert set(r.times) == {"draft", "verify", "accept"} and r.drafter_passes == r.k  # sequential: K passes
        if not r.done:
            assert r.tokens == r.drafts[:r.accepted] + [r.bonus]
    stats = SpecStats.from_rounds(3, rounds)
    keep = ("k", "rounds", "accepted", "attempted_at", "accepted_at", "new_tokens", "target_forwards",
            "drafter_passes")
    assert {x: getattr(stats, x) for x in keep} == {x: getattr(res.stats, x) for x in keep}
    assert stats.target_forwards == len(rounds) and stats.rounds == len(rounds) - 1


def test_slots_state_the_eagle_shift_and_propose_takes_them():
    from peagle_lab.decoding.slots import Slots

    taps = torch.randn(4, 6)
    slots = Slots.after_prefill([10, 11, 12, 13], 14, taps)
    assert slots.tokens == [11, 12, 13, 14] and slots.start == 0 and slots.end == 4  # slot t: token t+1, taps t
    tail = slots.tail(2)
    assert tail.tokens == [13, 14] and tail.start == 2 and torch.equal(tail.taps, taps[2:])
    after = Slots.after_round([7, 8], torch.randn(5, 6), 9)
    assert after.tokens == [7, 8] and len(after.taps) == 2 and after.start == 9
    with pytest.raises(ValueError, match="slot t pairs"):
        Slots([1, 2], torch.randn(3, 6))
    # HeadDrafter.propose(slots, ...) drafts from the slots' tokens and taps: the same as from the explicit ones
    target = make_tiny_llama()
    head = make_random_head(target, "parallel")
    runner = TargetRunner(target)
    prompt = [5, 6, 7, 8]
    logits, taps = runner.forward(prompt)
    slots = Slots.after_prefill(prompt, int(logits[-1].argmax()), taps)
    new, _ = HeadDrafter(head).propose(slots, 4, Sampling(), None)
    old, _ = HeadDrafter(head).propose(Slots(list(slots.tokens), slots.taps.clone(), 0), 4, Sampling(), None)
    assert torch.equal(new, old)


def test_spec_stats_merge_pools_counts_and_pads_a_shorter_k():
    from peagle_lab.decoding.speculative import SpecStats

    a, b = SpecStats(k=3), SpecStats(k=2)
    a.add_round(2, 3)
    a.add_round(0, 3)
    b.add_round(2, 2)
    a.new_tokens, b.new_tokens, a.times, b.times = 4, 3, {"draft": 1.0}, {"draft": 0.5, "verify": 2.0}
    m = a.merge(b)
    assert (m.k, m.rounds, m.accepted, m.new_tokens) == (3, 3, [2, 0, 2], 7)
    assert m.attempted_at == [3, 2, 1] and m.accepted_at == [2, 2, 0]
    assert m.times == {"draft": 1.5, "verify": 2.0}
    assert SpecStats.merged([a, b]).as_dict() == m.as_dict()
    assert a.rounds == 2 and b.rounds == 1  # the inputs are left as they were
    assert SpecStats.merged([], k=4).as_dict()["rounds"] == 0


def test_conditional_and_unconditional_acceptance_are_different_rates_with_one_meaning_each():
    from peagle_lab.serving.metrics import conditional_acceptance, summarise_spec, unconditional_acceptance
    from peagle_lab.decoding.speculative import SpecStats

    s = SpecStats(k=3)
    s.add_round(2, 3)  # slots 1, 2 accepted, 3 rejected
    s.add_round(0, 3)  # slot 1 rejected
    assert s.conditional_acceptance == [0.5, 1.0, 0.0]  # P(j | all before j accepted)
    assert s.unconditional_acceptance == [0.5, 0.5, 0.0]  # P(j accepted) per round
    # vLLM's counters for the same two rounds: the readers give the same two rates
    assert unconditional_acceptance(2, [1, 1, 0]) == s.unconditional_acceptance
    assert conditional_acceptance(2, [1, 1, 0]) == s.conditional_acceptance
    m = summarise_spec(2, 6, 2, [1, 1, 0])
    assert m["unconditional_acceptance"] == m["per_position_acceptance"] == s.unconditional_acceptance  # old key kept
    assert m["conditional_acceptance"] == s.conditional_acceptance
    d = s.as_dict()
    assert d["per_position_acceptance"] == s.conditional_acceptance  # the key results files already use
    assert d["unconditional_acceptance"] == s.unconditional_acceptance
