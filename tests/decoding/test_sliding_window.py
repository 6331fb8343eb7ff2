"""Targets with sliding-window layers (GPT-OSS: alternating sliding and full attention, attention sinks, a mixture
of experts; Mistral: a window on every layer) are rolled back losslessly by the loop's position cache: greedy
speculative output equals plain greedy and ``model.generate`` (whose cache really evicts) for every K and both
drafting modes, on prompts longer than the window, and the sampled path keeps the target's distribution. What
keeps a running state is refused in one line."""

from __future__ import annotations

import pytest
import torch

from peagle_lab import kv_cache
from peagle_lab.decoding.draft_sources import DraftSource, HeadDrafter, OracleDrafter
from peagle_lab.decoding.sampling import Sampling
from peagle_lab.decoding.speculative import plain_generate, speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner
from peagle_lab.errors import PeagleError

from conftest import WINDOW, make_random_head, make_random_ids, make_tiny_gpt_oss


def make_tiny_mistral(window=WINDOW, seed=0):
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=window,
                        max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    return MistralForCausalLM(cfg).to(torch.float32).eval().requires_grad_(False)


class PartlyRightOracle(DraftSource):
    """Proposes the reference continuation with one slot per round made wrong (chosen at random, sometimes none):
    every round accepts some drafts and rejects the rest, so the cache is rolled back past accepted positions."""

    name = "partly-right"

    def __init__(self, reference_ids, vocab_size, seed=0):
        self.oracle = OracleDrafter(reference_ids, vocab_size)
        self.vocab_size = vocab_size
        self.gen = torch.Generator().manual_seed(seed)

    def propose(self, slots, k, sampling, gen):
        ids, _ = self.oracle.propose(slots, k, sampling, gen)
        wrong = int(torch.randint(0, k + 1, (1,), generator=self.gen))
        if wrong < k:
            ids[wrong] = (ids[wrong] + 1) % self.vocab_size
        return ids, None


def hf_generate(model, prompt, n):
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def gpt_oss():
    return make_tiny_gpt_oss()


PROMPT_LEN, NEW = 3 * WINDOW + 5, 4 * WINDOW  # the prompt alone is three windows long; the output four more


@pytest.fixture(scope="module")
def reference(gpt_oss):
    prompt = make_random_ids(length=PROMPT_LEN, seed=11, vocab=96)[0].tolist()
    base = plain_generate(TargetRunner(gpt_oss), prompt, NEW)
    return prompt, base.tokens


def test_plain_greedy_through_the_position_cache_equals_generate_whose_cache_evicts(gpt_oss, reference):
    prompt, tokens = reference
    assert gpt_oss.config.layer_types.count("sliding_attention") == 2 and len(prompt) > WINDOW
    assert tokens == hf_generate(gpt_oss, prompt, NEW)


def test_the_window_is_applied_not_ignored(gpt_oss, reference):
    """The same weights with a window wider than the sequence give other logits: the window is in force."""
    prompt, _ = reference
    wide = make_tiny_gpt_oss(window=512)
    wide.load_state_dict(gpt_oss.state_dict())
    ids = torch.tensor([prompt])
    with torch.no_grad():
        assert not torch.allclose(gpt_oss(ids).logits[0, -1], wide(ids).logits[0, -1], atol=1e-4)


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_speculative_output_equals_plain_greedy_past_the_window(gpt_oss, reference, mode, k):
    prompt, tokens = reference
    runner = TargetRunner(gpt_oss)
    res = speculative_generate(runner, HeadDrafter(make_random_head(gpt_oss, mode, seed=k)), prompt, k, NEW)
    assert res.tokens == tokens
    partly = speculative_generate(runner, PartlyRightOracle(prompt + tokens, 96, seed=k), prompt, k, NEW)
    assert partly.tokens == tokens
    assert partly.stats.rounds > 1 and 1.0 < partly.stats.acceptance_length < k + 1 or k == 1


@pytest.mark.parametrize("k", [1, 3, 7])
def test_a_mistral_window_on_every_layer_rolls_back_too(k):
    model = make_tiny_mistral()
    prompt = make_random_ids(length=2 * WINDOW + 3, seed=5, vocab=96)[0].tolist()
    runner = TargetRunner(model)
    base = plain_generate(runner, prompt, 3 * WINDOW)
    assert base.tokens == hf_generate(model, prompt, 3 * WINDOW)
    res = speculative_generate(runner, PartlyRightOracle(prompt + base.tokens, 96, seed=k), prompt, k, 3 * WINDOW)
    assert res.tokens == base.tokens


def test_speculative_sampling_past_the_window_preserves_the_target_distribution():
    from test_speculative import chi_square_pvalue, exact_two_token_distribution, sample_two_tokens

    target = make_tiny_gpt_oss(vocab=12, window=2, seed=5, sharpen=6.0)
    prompt = [4, 7, 9, 5, 6]  # longer than the window: the two sampled tokens attend through it
    sampling = Sampling(1.0)
    head = make_random_head(target, "parallel", seed=3)
    with torch.no_grad():
        head.lm_head.weight.mul_(40.0)  # a confident but wrong head: many rejections, many rollbacks
    probs = exact_two_token_distribution(target, prompt, sampling)
    counts = sample_two_tokens(target, lambda: HeadDrafter(head), prompt, sampling, n=2000, k=3)
    assert chi_square_pvalue(counts, probs) > 1e-3


def test_layers_with_a_running_state_are_refused_in_one_line():
    cfg = type("Cfg", (), dict(layer_types=["full_attention", "linear_attention", "linear_attention", "mamba"],
                               max_position_embeddings=256))()
    with pytest.raises(PeagleError) as err:
        kv_cache.check_cache_rollback(cfg)
    msg = str(err.value)
    assert "2 'linear_attention' layer(s) (e.g. layer 1)" in msg and "1 'mamba' layer(s) (e.g. layer 3)" in msg
    assert msg.count("Fix:") == 1 and "\n" not in msg


def test_attention_layers_of_every_kind_are_accepted(gpt_oss):
    kv_cache.check_cache_rollback(gpt_oss.config)
    kv_cache.check_cache_rollback(make_tiny_mistral().config)
    cfg = type("Cfg", (), dict(layer_types=["chunked_attention", "full_attention"], attention_chunk_size=8))()
    kv_cache.check_cache_rollback(cfg)
