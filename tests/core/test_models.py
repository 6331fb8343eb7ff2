"""Target loading: cache location, errors that name the fix, and the embedded default's shape."""

from __future__ import annotations

import pytest
import torch

from peagle_lab import models
from peagle_lab.errors import PeagleError


def test_cache_dir_follows_peagle_cache(monkeypatch, tmp_path):
    wanted = tmp_path / "cache" / "nested"
    monkeypatch.setenv("PEAGLE_CACHE", str(wanted))
    assert models.cache_dir() == wanted
    assert not wanted.exists()  # asking for the path creates nothing; the writers create what they write into


def test_target_name_defaults_to_embedded_model(monkeypatch, tmp_path):
    monkeypatch.delenv("PEAGLE_TARGET", raising=False)
    assert models.target_name() == models.DEFAULT_TARGET
    monkeypatch.setenv("PEAGLE_TARGET", str(tmp_path))
    assert models.target_name() == str(tmp_path)
    assert models.resolve_target(str(tmp_path)) == str(tmp_path)
    assert models.resolve_target("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"  # a hub id passes through
    with pytest.raises(PeagleError, match="does not exist"):  # a local path that is not there says so
        models.resolve_target(str(tmp_path / "no-such-model"))


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_bad_local_path_raises_peagle_error_with_the_fix(monkeypatch, tmp_path, kind):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never wait on a hub that is not there
    path = tmp_path / "no-such-model" if kind == "missing" else tmp_path
    with pytest.raises(PeagleError, match="Fix:") as err:
        models.load_target(str(path))
    assert str(path) in str(err.value)


def test_pick_device_honours_env(monkeypatch):
    monkeypatch.setenv("PEAGLE_DEVICE", "cpu")
    assert models.pick_device().type == "cpu"
    with pytest.raises(PeagleError, match="not supported. Fix: --device cpu or cuda"):
        models.pick_device("meta")  # no weights live there: refused with the fix


def test_embedded_target_is_smollm2_135m(smollm2):
    model, tok = smollm2
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (30, 576, 49152)
    assert not model.training
    assert tok.chat_template
    assert tok.pad_token_id is not None


def test_tiny_llama_fixture_is_a_seeded_eval_fp32_llama(tiny_llama, random_ids):
    model = tiny_llama()
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.vocab_size) == (32, 4, 4, 2, 96)
    assert not model.training and model.dtype == torch.float32
    assert all(not p.requires_grad for p in model.parameters())
    same, other = tiny_llama(), tiny_llama(seed=1)
    w = model.model.embed_tokens.weight
    assert torch.equal(w, same.model.embed_tokens.weight) and not torch.equal(w, other.model.embed_tokens.weight)
    ids = random_ids(batch=2, length=5, vocab=cfg.vocab_size)
    out = model(input_ids=ids, output_hidden_states=True)
    assert out.logits.shape == (2, 5, 96) and len(out.hidden_states) == 5


def test_load_target_puts_weights_on_the_device_at_load(tmp_path, tiny_llama, byte_tokenizer, monkeypatch):
    """The weights load on the device in the dtype (device_map / dtype at load), never CPU first then .to()."""
    from transformers import AutoModelForCausalLM

    tiny_llama(hidden=16, layers=2).save_pretrained(tmp_path)
    byte_tokenizer.save_pretrained(tmp_path)
    seen = {}
    real = AutoModelForCausalLM.from_pretrained

    def spy(path, **kw):
        seen.update(kw)
        return real(path, **kw)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    model, _ = models.load_target(str(tmp_path), device="cpu", dtype=torch.bfloat16)
    assert seen == {"dtype": torch.bfloat16, "device_map": "cpu"}
    assert model.dtype == torch.bfloat16 and next(model.parameters()).device.type == "cpu"
    monkeypatch.setattr(torch.nn.Module, "to", lambda *a, **k: pytest.fail("the model was moved after loading"))
    models.load_target(str(tmp_path), device="cpu", dtype=torch.float32)
    assert models.load_kwargs("cuda:1", torch.bfloat16) == {"dtype": torch.bfloat16, "device_map": "cuda:1"}
