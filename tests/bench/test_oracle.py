"""The rated oracle (the engine at a published acceptance): its output is still the target's (the loop verifies),
its measured per-position acceptance follows the set rates, it is charged a real head pass per round, and the bench
shows it beside the real heads under its label."""

import math

import pytest
import torch

from conftest import make_random_ids, make_tiny_llama
from peagle_lab import bench
from peagle_lab.bench.oracle import PAPER, PRESETS
from peagle_lab.decoding.draft_sources import HeadDrafter, RatedOracleDrafter
from peagle_lab.errors import PeagleError
from peagle_lab.decoding.speculative import SpecStats, plain_generate, speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner


@pytest.fixture(scope="module")
def target():
    return make_tiny_llama(hidden=32, layers=3, vocab=96, max_positions=4096)


def _run(target, rates, k, prompts=4, new=120, cost=None, seed=0):
    runner = TargetRunner(target, cost.head.config.aux_hidden_state_layer_ids if cost else None)
    drafter = RatedOracleDrafter(rates, target.config.vocab_size, cost=cost, seed=seed)
    stats = []
    for i in range(prompts):
        prompt = make_random_ids(length=6 + i, seed=i)[0].tolist()
        base = plain_generate(runner, prompt, new)
        drafter.reference = prompt + base.tokens
        res = speculative_generate(runner, drafter, prompt, k, new)
        assert res.tokens == base.tokens, "the oracle's drafts are verified: the output is the target's"
        stats.append(res.stats)
    return SpecStats.merged(stats, k)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_the_rated_oracle_is_lossless_at_every_k(target, k):
    _run(target, [0.9, 0.5, 0.2], k, prompts=3, new=40)


def test_measured_per_position_acceptance_follows_the_set_rates(target):
    rates = [0.9, 0.6, 0.3, 0.75]
    st = _run(target, rates, 4, prompts=6, new=300)
    for j, r in enumerate(rates):
        n, got = st.attempted_at[j], st.conditional_acceptance[j]
        assert n >= 60, (j, n)
        # a binomial proportion: 4.5 standard errors (a false alarm about once in 150,000 per slot)
        assert abs(got - r) < 4.5 * math.sqrt(r * (1 - r) / n), (j, got, r, n)
    expected_al = 1 + sum(math.prod(rates[:j + 1]) for j in range(4))  # ignoring rounds cut at max_new_tokens
    assert abs(st.acceptance_length - expected_al) < 0.25, (st.acceptance_length, expected_al)


def test_rates_of_one_and_zero_accept_everything_and_nothing(target):
    assert _run(target, [1.0], 5, prompts=2, new=60).accepted_at[4] > 0
    all_in = _run(target, [1.0], 5, prompts=2, new=60)
    assert all(a == t for a, t in zip(all_in.accepted_at, all_in.attempted_at))
    assert _run(target, [0.0], 5, prompts=2, new=30).acceptance_length == 1.0


def test_the_oracle_is_charged_one_real_head_pass_per_round(target):
    head = bench.fresh_head(target, "parallel", mask_token_id=3)
    st = _run(target, [0.7], 4, prompts=2, new=40, cost=HeadDrafter(head, "parallel"))
    assert st.drafter_passes == st.rounds and st.times["draft"] > 0


def test_oracle_rates_read_presets_lists_and_the_papers_figure_per_suite():
    assert bench.oracle_rates("0.8,0.5") == ([0.8, 0.5], "given rates")
    assert bench.oracle_rates("paper", "code")[0] == PRESETS[PAPER["code"]][0]
    assert bench.oracle_rates("paper", "chat")[0] == PRESETS[PAPER["chat"]][0]
    c = bench.constant_rate_for(3.94, 7)
    assert abs(1 + sum(c ** j for j in range(1, 8)) - 3.94) < 1e-3
    cond = PRESETS["vllm-pr32628"][0]
    assert abs(1 + sum(math.prod(cond[:j + 1]) for j in range(7)) - 2.56) < 0.01  # back to the PR's AL
    for bad in ("1.5", "x", "", "blog"):
        with pytest.raises(PeagleError):
            bench.oracle_rates(bad)
    with pytest.raises(PeagleError):
        RatedOracleDrafter([0.5, -0.1], 96)


def test_a_constant_rates_acceptance_length_and_the_rate_for_a_length_are_inverses():
    assert bench.constant_rate_acceptance_length(0.0, 7) == 1.0  # only the target's own token
    assert bench.constant_rate_acceptance_length(1.0, 7) == 8.0  # every slot accepted
    assert bench.constant_rate_acceptance_length(0.5, 2) == pytest.approx(1.75)
    for al, k in ((3.94, 7), (3.70, 7), (1.5, 1), (2.2, 4)):
        assert bench.constant_rate_acceptance_length(bench.constant_rate_for(al, k), k) == pytest.approx(al, abs=1e-3)
    with pytest.raises(PeagleError):
        bench.constant_rate_for(9.0, 7)


def test_the_bench_shows_the_oracle_beside_the_real_heads(target):
    torch.manual_seed(0)
    head = bench.fresh_head(target, "parallel", mask_token_id=3)
    prompts = [make_random_ids(length=8, seed=s)[0].tolist() for s in range(2)]
    e2e = bench.end_to_end(target, None, bench.BenchConfig(ks_parallel=[3], prompts=prompts, max_new_tokens=30,
                                                           pld_ks=[], hf_greedy=False, oracle_ks=[3],
                                                           oracle_accept="0.9"), parallel_head=head)
    row = next(m for m in e2e["methods"] if m["family"] == "oracle")
    assert row["method"] == "oracle (acceptance 0.9) K=3" and row["lossless"] is True
    assert row["acceptance_length"] > next(m for m in e2e["methods"] if m["family"] == "p-eagle")["acceptance_length"]
    assert e2e["config"]["oracle_rates"] == [0.9] and e2e["config"]["oracle_ks"] == [3]
    paper = bench.end_to_end(target, None, bench.BenchConfig(ks_parallel=[2], prompts=prompts[:1], max_new_tokens=12,
                                                             pld_ks=[], hf_greedy=False, oracle_ks=[2]),
                             parallel_head=head)
    assert any(m["method"] == "oracle (paper's acceptance) K=2" for m in paper["methods"])


def test_where_verification_leaves_the_plain_run_the_oracle_follows_its_own_output(target, monkeypatch):
    """A bf16 near-tie broken the other way by the verification is imitated by a reference that is wrong from
    token 10 on: the oracle must then take the loop's own output as the reference, or every later draft fails."""
    import peagle_lab.bench.oracle as oracle

    real = oracle.plain_generate

    def off_at_10(*args, **kwargs):
        res = real(*args, **kwargs)
        res.tokens[10:] = [(t + 1) % 96 for t in res.tokens[10:]]  # another continuation from token 10 on
        return res

    monkeypatch.setattr(oracle, "plain_generate", off_at_10)
    head = bench.fresh_head(target, "parallel", mask_token_id=3)
    runner = TargetRunner(target, head.config.aux_hidden_state_layer_ids)
    prompt = make_random_ids(length=8, seed=0)[0].tolist()
    assert oracle.oracle_method(runner, head, [1.0], 4).run(prompt, 80).stats["acceptance_length"] == 5.0
    monkeypatch.setattr(oracle, "ORACLE_ATTEMPTS", 1)
    assert oracle.oracle_method(runner, head, [1.0], 4).run(prompt, 80).stats["acceptance_length"] < 3.0


def test_with_both_heads_the_same_draws_are_charged_parallel_and_sequential_drafting(target):
    """P-EAGLE's claim in one comparison: the oracle charged one parallel pass and the oracle charged K sequential
    passes accept the same drafts in the same rounds; only their drafting cost differs."""
    torch.manual_seed(0)
    par = bench.fresh_head(target, "parallel", mask_token_id=3)
    seq = bench.fresh_head(target, "sequential", mask_token_id=3)
    prompts = [make_random_ids(length=8, seed=s)[0].tolist() for s in range(2)]
    e2e = bench.end_to_end(target, None, bench.BenchConfig(ks_parallel=[4], ks_sequential=[4], prompts=prompts,
                                                           max_new_tokens=30, pld_ks=[], hf_greedy=False,
                                                           oracle_ks=[4], oracle_accept="0.8"),
                           parallel_head=par, sequential_head=seq)
    one = next(m for m in e2e["methods"] if m["family"] == "oracle")
    k_passes = next(m for m in e2e["methods"] if m["family"] == "oracle-sequential")
    assert k_passes["method"] == "oracle (acceptance 0.8, sequential drafting) K=4" and k_passes["lossless"] is True
    assert k_passes["acceptance_length"] == one["acceptance_length"] and k_passes["rounds"] == one["rounds"]
    runs = {m: [r for r in e2e["runs"] if r["method"] == m] for m in (one["method"], k_passes["method"])}
    assert [r["stats"]["accepted_at"] for r in runs[one["method"]]] == \
        [r["stats"]["accepted_at"] for r in runs[k_passes["method"]]]
    alone = bench.end_to_end(target, None, bench.BenchConfig(ks_parallel=[2], prompts=prompts[:1], max_new_tokens=12,
                                                             pld_ks=[], hf_greedy=False, oracle_ks=[2]),
                             parallel_head=par)
    assert not any(m["family"] == "oracle-sequential" for m in alone["methods"])


def test_the_sequential_charge_needs_a_sequential_head(target):
    runner = TargetRunner(target, None)
    with pytest.raises(PeagleError, match="--sequential-head"):
        bench.oracle_method(runner, None, [0.5], 3, mode="sequential")
    with pytest.raises(PeagleError, match="'parallel' or 'sequential'"):
        bench.oracle_method(runner, None, [0.5], 3, mode="tree")


def test_the_paper_target_is_humaneval_on_code_and_mt_bench_on_chat():
    from peagle_lab.bench.oracle import paper_target

    al, name = paper_target("code", 7)
    assert name == "HumanEval" and al == pytest.approx(3.94, abs=0.01)
    al, name = paper_target("chat", 7)
    assert name == "MT-Bench" and al == pytest.approx(3.70, abs=0.01)
