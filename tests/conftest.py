"""Shared test fixtures: tiny random Llama targets built in the test (no downloads), a byte-level chat
tokenizer built in memory, and the real embedded target for the tests marked ``real_model``.

Use the factories through their fixtures::

    def test_shapes(tiny_llama, random_ids):
        model = tiny_llama(hidden=16, layers=2)
        ids = random_ids(batch=2, length=7, vocab=model.config.vocab_size)
"""

from __future__ import annotations

from peagle_lab.settings import prefer_passive_omp_wait

prefer_passive_omp_wait()  # before torch loads OpenMP (importing peagle_lab alone does not set it)

import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

# Tiny models are dominated by per-op overhead: one thread is fastest, and it does not oversubscribe the
# 2-core CI machine when a notebook kernel or vLLM runs beside the tests.
torch.set_num_threads(1)


def make_tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=96, seed=0, intermediate=None,
                    max_positions=256):
    """An eval-mode fp32 ``LlamaForCausalLM`` with random weights from a fixed seed; no gradients."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.requires_grad_(False)
    return model


WINDOW = 8  # the sliding window of the tiny GPT-OSS target


def make_tiny_gpt_oss(vocab=96, window=WINDOW, seed=0, sharpen=1.0, layers=4):
    """An eval-mode fp32 ``GptOssForCausalLM``: ``layers`` alternate sliding (``window``) and full attention, with
    attention sinks and 4 experts (top-2); random weights from ``seed``."""
    from transformers import GptOssConfig, GptOssForCausalLM

    cfg = GptOssConfig(vocab_size=vocab, hidden_size=32, intermediate_size=32, num_hidden_layers=layers,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=window,
                       layer_types=["sliding_attention", "full_attention"] * (layers // 2), num_local_experts=4,
                       num_experts_per_tok=2, max_position_embeddings=512, initializer_range=0.2,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False,
                       bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GptOssForCausalLM(cfg).to(torch.float32).eval()
    with torch.no_grad():
        for layer in model.model.layers:  # sinks that matter: the softmax gives them a visible share
            layer.self_attn.sinks.normal_(0.0, 1.0)
        model.lm_head.weight.mul_(sharpen)
    model.requires_grad_(False)
    return model


def make_random_head(target, mode="parallel", seed=0, layers=1, draft_vocab=None, mask_token=3, k=8, **config):
    """The test head: an eval-mode P-EAGLE head for ``target`` drafting in ``mode`` (mask token ``mask_token``,
    K = ``k``), its layers drawn from ``seed`` and initialised from the target; with ``draft_vocab``, a random
    sorted draft vocabulary of that many tokens (drawn after the layers); ``config``: more
    ``PEagleConfig.from_target`` fields (``extra=...``)."""
    from peagle_lab.drafter import PEagleConfig, PEagleDrafter

    torch.manual_seed(seed)
    cfg = PEagleConfig.from_target(target.config, num_hidden_layers=layers, mask_token_id=mask_token, mode=mode,
                                   draft_vocab_size=draft_vocab, num_speculative_tokens=k, **config)
    head = PEagleDrafter(cfg).init_from_target(target).eval()
    if draft_vocab:
        head.set_draft_vocab(torch.randperm(target.config.vocab_size)[:draft_vocab].sort().values)
    return head


def make_random_ids(batch=1, length=8, vocab=96, seed=0, low=3):
    """Random token ids in ``[low, vocab)`` (ids below ``low`` are pad/bos/eos in the tiny configs)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab, (batch, length), generator=gen)


CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_byte_tokenizer(chat_template: str | None = CHATML_TEMPLATE):
    """A byte-level tokenizer (one token per byte, no merges) with ChatML special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend)
    tok.add_special_tokens({"eos_token": "<|im_end|>", "bos_token": "<|im_start|>", "pad_token": "<|endoftext|>"})
    tok.chat_template = chat_template
    return tok


@pytest.fixture
def tiny_llama():
    """Factory: ``tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=96, seed=0)``."""
    return make_tiny_llama


@pytest.fixture
def random_ids():
    """Factory: ``random_ids(batch=1, length=8, vocab=96, seed=0)`` -> LongTensor (batch, length)."""
    return make_random_ids


@pytest.fixture(scope="session")
def byte_tokenizer():
    return make_byte_tokenizer()


@pytest.fixture
def tiny_distilled(tmp_path, byte_tokenizer):
    """Factory: ``tiny_distilled(n=6, base_len=12, seed=0)`` -> ``(data, target_args)``: a tiny Llama target saved
    under ``tmp_path/target`` with the byte tokenizer, ``n`` distilled records of random ids (record ``i`` has
    ``base_len + i`` tokens, a 3-token prompt) in ``tmp_path/distilled.jsonl``, and the CLI options naming that
    target (CPU, float32)."""
    import json

    def make(n: int = 6, base_len: int = 12, seed: int = 0):
        model = make_tiny_llama(hidden=32, layers=4, vocab=len(byte_tokenizer))
        model.save_pretrained(tmp_path / "target")
        byte_tokenizer.save_pretrained(tmp_path / "target")
        data = tmp_path / "distilled.jsonl"
        meta = {"format": "peagle-lab-distill", "version": 1, "target": "tiny", "max_new_tokens": 8, "system": None,
                "decoding": "greedy"}
        gen = torch.Generator().manual_seed(seed)
        lines = [json.dumps({"meta": meta})] + [json.dumps(
            {"index": i, "prompt_sha": f"p{i}", "prompt_len": 3, "finished": True,
             "input_ids": torch.randint(4, 200, (base_len + i,), generator=gen).tolist()}) for i in range(n)]
        data.write_text("\n".join(lines) + "\n")
        return data, ["--target", str(tmp_path / "target"), "--device", "cpu", "--dtype", "float32"]

    return make


@pytest.fixture(scope="session")
def smollm2():
    """``(model, tokenizer)`` of the embedded SmolLM2-135M-Instruct, loaded once per session (CPU, fp32).

    Tests that use it are marked ``real_model`` automatically (see ``pytest_collection_modifyitems``)."""
    from peagle_lab.models import load_target

    return load_target("smollm2-135m", device="cpu", dtype=torch.float32)


@pytest.fixture(scope="session")
def smollm2_bf16():
    """The embedded target in bfloat16 (slow where the CPU has no native bf16, but correct)."""
    from peagle_lab.models import load_target

    return load_target("smollm2-135m", device="cpu", dtype=torch.bfloat16)


class ReachedLongWork(Exception):
    """Raised by the replaced model loader and export writer (:func:`no_long_work`): the checks let this input
    through to the long part."""


@pytest.fixture
def no_long_work(monkeypatch):
    """The one bad-input fixture: loading a target and writing an export raise :class:`ReachedLongWork`, so a test
    sees whether a command's checks stop bad input before any long work; the environment's device, dtype and CI
    settings are cleared."""
    import peagle_lab.models as models
    import peagle_lab.serving.export as export

    def reached(*a, **k):
        raise ReachedLongWork

    monkeypatch.setattr(models, "load_target", reached)
    monkeypatch.setattr(export, "_export", reached)
    for var in ("PEAGLE_DEVICE", "PEAGLE_DTYPE", "PEAGLE_CI"):
        monkeypatch.delenv(var, raising=False)
    return reached


def pytest_collection_modifyitems(config, items):
    for item in items:
        if {"smollm2", "smollm2_bf16"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.real_model)
