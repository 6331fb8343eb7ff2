"""Heads in vLLM's eagle3 layout load whatever wrote them: our export, speculators, the published P-EAGLE heads
(``layers.N.*`` or ``midlayer.*``, 1..N layers, ``d2t`` / ``t2d`` or none, the mask token under any of vLLM's
keys, taps from the config or vLLM's default rule); a hub id is fetched or named with the command that fetches
it; a head that does not fit its target is refused naming both sides."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from peagle_lab import serving
from peagle_lab.decoding.draft_sources import HeadDrafter
from peagle_lab.decoding.speculative import plain_generate, speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner
from peagle_lab.drafter import PEagleConfig, PEagleDrafter
from peagle_lab.drafter import heads as heads_mod
from peagle_lab.drafter import hub
from peagle_lab.drafter.heads import check_head_spec, head_for_target
from peagle_lab.errors import PeagleError

from conftest import make_tiny_llama

MASK = 7


def random_head(target_config, layers=4, draft_vocab=None, seed=0, taps=None, k=10) -> PEagleDrafter:
    """A randomly initialised head for a target (every weight random, norms too: nothing is the identity)."""
    torch.manual_seed(seed)
    cfg = PEagleConfig.from_target(target_config, num_hidden_layers=layers, draft_vocab_size=draft_vocab,
                                   mask_token_id=MASK, aux_layer_ids=taps, num_speculative_tokens=k,
                                   embed_shared_with_target=False)
    head = PEagleDrafter(cfg)
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, 0.05 if p.dim() > 1 else 1.0)
    if draft_vocab:
        head.set_draft_vocab(torch.randperm(target_config.vocab_size)[:draft_vocab].sort().values)
    return head.eval()


def published_config(head: PEagleDrafter, taps: bool) -> dict:
    """A config.json as the published heads write it: a flat LlamaForCausalLMEagle3 config with ``ptd_token_id``,
    no ``peagle`` block, the taps only when ``taps``."""
    c = head.config
    d = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": c.hidden_size,
         "intermediate_size": c.intermediate_size, "num_attention_heads": c.num_attention_heads,
         "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim, "num_hidden_layers": c.num_hidden_layers,
         "hidden_act": "silu", "rms_norm_eps": c.rms_norm_eps, "max_position_embeddings": c.max_position_embeddings,
         "rope_theta": c.rope_theta, "vocab_size": c.vocab_size, "draft_vocab_size": c.draft_vocab_size,
         "ptd_token_id": c.mask_token_id, "tie_word_embeddings": False, "torch_dtype": "float32"}
    if taps:
        d["eagle_aux_hidden_state_layer_ids"] = list(c.aux_hidden_state_layer_ids)
    return d


def write_published(head: PEagleDrafter, path, taps=False, layer0="layers.0.", d2t=True, config=None):
    """``head``'s weights as a published head stores them: layer 0 under ``layer0``, the full embeddings,
    ``d2t`` (when ``d2t``), no ``t2d``."""
    path.mkdir(parents=True)
    out = {}
    for k, v in head.state_dict().items():
        if k == "t2d" or (k == "d2t" and not d2t):
            continue
        out[layer0 + k[len("midlayer."):] if k.startswith("midlayer.") else k] = v.contiguous()
    save_file(out, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(config or published_config(head, taps)))
    return path


def logits(head: PEagleDrafter, vocab: int, n_taps_width: int, seed=3, k=10):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (12,), generator=g)
    taps = torch.randn(12, n_taps_width, generator=g)
    with torch.no_grad():
        return head.one_pass_logits(ids, taps, k)


# ------------------------------------------------------------------------------------------ the tiny Qwen3 target
@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from peagle_lab.tiny_target import make_tiny_target

    path = make_tiny_target(tmp_path_factory.mktemp("tiny") / "tiny-qwen3")
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.mark.slow
@pytest.mark.parametrize("taps", [True, False])
def test_published_layout_4_layer_k10_head_loads_with_its_logits_and_drafts_losslessly(qwen3, tmp_path, taps):
    ref = random_head(qwen3.config, layers=4, draft_vocab=1024)
    path = write_published(ref, tmp_path / "published", taps=taps)
    head, info = head_for_target(str(path), qwen3)
    c = head.config
    assert (c.num_hidden_layers, c.mask_token_id, c.draft_vocab_size, c.mode) == (4, MASK, 1024, "parallel")
    assert c.aux_hidden_state_layer_ids == (2, 4, 5)  # written, or vLLM's rule (2, L//2, L-3) for L = 8
    width = 3 * qwen3.config.hidden_size
    assert torch.equal(logits(head, c.vocab_size, width), logits(ref, c.vocab_size, width))
    runner = TargetRunner(qwen3, c.aux_hidden_state_layer_ids)
    prompt = list(range(40, 70))
    base = plain_generate(runner, prompt, 40)
    for mode in ("parallel", "sequential"):
        res = speculative_generate(runner, HeadDrafter(head, mode), prompt, 10, 40)
        assert res.tokens == base.tokens, mode
        assert res.stats.rounds >= 1


@pytest.mark.slow
@pytest.mark.parametrize("taps", [True, False])
def test_published_layout_4_layer_k10_head_drafts_losslessly_for_gpt_oss_past_its_window(tmp_path, taps):
    """GPT-OSS, the published heads' target: sliding and full layers, sinks, experts; prompt and output longer
    than the window."""
    from conftest import WINDOW, make_tiny_gpt_oss

    target = make_tiny_gpt_oss(layers=8)
    ref = random_head(target.config, layers=4, draft_vocab=64)
    head, _ = head_for_target(str(write_published(ref, tmp_path / "published", taps=taps)), target)
    c = head.config
    assert (c.num_hidden_layers, c.mask_token_id, c.mode, c.aux_hidden_state_layer_ids) == (4, MASK, "parallel",
                                                                                            (2, 4, 5))
    width = 3 * target.config.hidden_size
    assert torch.equal(logits(head, c.vocab_size, width), logits(ref, c.vocab_size, width))
    runner = TargetRunner(target, c.aux_hidden_state_layer_ids)
    prompt = list(range(10, 10 + 3 * WINDOW))
    base = plain_generate(runner, prompt, 4 * WINDOW)
    for mode in ("parallel", "sequential"):
        res = speculative_generate(runner, HeadDrafter(head, mode), prompt, 10, 4 * WINDOW)
        assert res.tokens == base.tokens, mode


@pytest.mark.slow
def test_published_head_for_another_vocabulary_hidden_size_or_depth_is_refused_naming_both_sides(qwen3, tmp_path):
    small = make_tiny_llama(hidden=32, layers=4, vocab=96)
    path = write_published(random_head(small.config, layers=2), tmp_path / "other")
    with pytest.raises(PeagleError, match=r"vocabulary 96 \(head\) vs 3072 \(target\).*hidden size 32 \(head\) vs "
                                          r"256 \(target\)"):
        head_for_target(str(path), qwen3)
    with pytest.raises(PeagleError, match=r"vocabulary 96 \(head\) vs 3072 \(target\)"):
        check_head_spec(str(path), qwen3.config)  # before the target loads: its config only
    deep = random_head(make_tiny_llama(hidden=256, heads=4, kv_heads=2, vocab=3072, layers=8).config, layers=1)
    cfg = published_config(deep, taps=True)
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 20, 37]
    path = write_published(deep, tmp_path / "deep", config=cfg)
    with pytest.raises(PeagleError, match=r"tap layer ids \[20, 37\] are out of range for a target with 8 layers"):
        head_for_target(str(path), qwen3)


# ------------------------------------------------------------------------------------------ layouts, both ways
@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("target")
    make_tiny_llama(hidden=32, layers=8, heads=4, kv_heads=2, vocab=96).save_pretrained(path)
    return path


def _llama():
    return make_tiny_llama(hidden=32, layers=8, heads=4, kv_heads=2, vocab=96)


@pytest.mark.parametrize("layers", [2, 4])
@pytest.mark.parametrize("draft_vocab", [None, 40])
def test_multi_layer_heads_export_and_load_both_ways_with_identical_logits(tmp_path, target_dir, layers, draft_vocab):
    target = _llama()
    ref = random_head(target.config, layers=layers, draft_vocab=draft_vocab, taps=(1, 4, 6), k=6)
    ref.config.target = str(target_dir)
    native = ref.save_pretrained(tmp_path / "native", dtype=torch.float32)
    w = 3 * 32
    want = logits(ref, 96, w)
    # ours -> vLLM's layout -> read back
    exported = serving.export_vllm(native, tmp_path / "vllm", target=target_dir)
    assert torch.equal(logits(PEagleDrafter.from_pretrained(exported, target=target), 96, w), want)
    # vLLM's layout as the published heads and speculators write it (layers.0.) -> read -> ours -> export -> read
    published = write_published(ref, tmp_path / "published", taps=True)
    back = PEagleDrafter.from_pretrained(published, target=target)
    assert torch.equal(logits(back, 96, w), want)
    back.config.target = str(target_dir)
    resaved = back.save_pretrained(tmp_path / "resaved", dtype=torch.float32)
    again = serving.export_vllm(resaved, tmp_path / "vllm2", target=target_dir)
    assert torch.equal(logits(PEagleDrafter.from_pretrained(again, target=target), 96, w), want)


def test_export_of_a_published_head_keeps_its_taps_from_the_default_rule(tmp_path, target_dir):
    target = _llama()
    ref = random_head(target.config, layers=2)  # from_target: vLLM's rule for 8 layers
    published = write_published(ref, tmp_path / "published", taps=False, layer0="midlayer.", d2t=False)
    out = serving.export_vllm(published, tmp_path / "vllm", target=target_dir)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5] == cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert torch.equal(logits(PEagleDrafter.from_pretrained(out, target=target), 96, 96), logits(ref, 96, 96))


def speculators_config(head: PEagleDrafter, kind="peagle", k=5) -> dict:
    c = head.config
    layer = {key: v for key, v in published_config(head, taps=False).items()
             if key not in ("draft_vocab_size", "ptd_token_id", "architectures")}
    return {"speculators_model_type": kind, "architectures": ["PEagleSpeculator"], "transformer_layer_config": layer,
            "draft_vocab_size": c.draft_vocab_size, "mask_token_id": c.mask_token_id, "norm_before_residual": False,
            "eagle_aux_hidden_state_layer_ids": list(c.aux_hidden_state_layer_ids),
            "speculators_config": {"proposal_methods": [{"speculative_tokens": k}],
                                   "verifier": {"name_or_path": "the-target"}}}


def test_speculators_peagle_head_loads_with_its_mode_k_target_and_logits(tmp_path):
    target = _llama()
    ref = random_head(target.config, layers=3, taps=(1, 4, 6))
    path = write_published(ref, tmp_path / "spec", config=speculators_config(ref))
    head = PEagleDrafter.from_pretrained(path, target=target)
    c = head.config
    assert (c.mode, c.num_speculative_tokens, c.target, c.mask_token_id, c.num_hidden_layers) == (
        "parallel", 5, "the-target", MASK, 3)
    assert torch.equal(logits(head, 96, 96), logits(ref, 96, 96))


def test_norm_before_residual_is_computed_as_vllm_does():
    target = _llama()
    ref = random_head(target.config, layers=1)
    d = published_config(ref, taps=True)
    normed = PEagleDrafter(PEagleConfig.from_json_dict({**d, "norm_before_residual": True}))
    normed.load_state_dict(ref.state_dict())
    layer, emb, h = normed.midlayer, torch.randn(1, 5, 32), torch.randn(1, 5, 32)
    pos = torch.arange(5)[None]
    cos, sin = normed.rotary(pos, h.dtype)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    hidden, residual = layer(emb, h, None, cos, sin, mask, None, 0)
    x = torch.cat([layer.input_layernorm(emb), layer.hidden_norm(h)], -1)
    want = layer.self_attn(x, cos, sin, mask) + layer.hidden_norm(h)  # the residual is the normed hidden state
    assert torch.allclose(residual, want, atol=1e-6)
    assert PEagleConfig.from_json_dict({**d, "norm_before_residual": True}).to_json_dict()["norm_before_residual"]


@pytest.mark.parametrize("key", ["mask_token_id", "pard_token", "ptd_token_id", "dflash_config"])
def test_the_mask_token_is_read_under_every_key_vllm_reads(key):
    d = published_config(random_head(_llama().config, layers=1), taps=True)
    del d["ptd_token_id"]
    d.update({key: {"mask_token_id": 9}} if key == "dflash_config" else {key: 9})
    cfg = PEagleConfig.from_json_dict(d)
    assert (cfg.mask_token_id, cfg.mode) == (9, "parallel")


def test_a_head_without_mask_token_is_an_eagle3_head_and_loads_without_mask_hidden(tmp_path):
    target = _llama()
    ref = random_head(target.config, layers=1)
    d = published_config(ref, taps=True)
    del d["ptd_token_id"]
    path = write_published(ref, tmp_path / "eagle3", config=d)
    w = load_file(str(path / "model.safetensors"))
    del w["mask_hidden"], w["embed_tokens.weight"]  # the embeddings shared with the target, as vLLM shares them
    save_file(w, str(path / "model.safetensors"))
    head = PEagleDrafter.from_pretrained(path, target=target)
    assert head.config.mode == "sequential"
    assert torch.equal(head.embed_tokens.weight, target.get_input_embeddings().weight)


def test_vllms_default_taps_follow_the_targets_depth():
    cfg = PEagleConfig.from_json_dict(published_config(random_head(_llama().config, layers=1), taps=False))
    assert cfg.aux_hidden_state_layer_ids == () and cfg.num_taps == 3
    assert PEagleConfig.from_json_dict(published_config(random_head(_llama().config, layers=1), taps=False)
                                       ).with_target_taps(40).aux_hidden_state_layer_ids == (2, 20, 37)
    assert cfg.with_target_taps(24).aux_hidden_state_layer_ids == (2, 12, 21)


@pytest.mark.parametrize("field, value, named", [("attention_bias", True, "attention_bias: true"),
                                                  ("norm_before_fc", True, "norm_before_fc: true"),
                                                  ("model_type", "qwen3", "model_type 'qwen3'")])
def test_heads_asking_for_what_this_drafter_does_not_compute_are_refused_by_field(field, value, named):
    d = published_config(random_head(_llama().config, layers=1), taps=True)
    with pytest.raises(PeagleError, match=named):
        PEagleConfig.from_json_dict({**d, field: value})


def test_layer_0_stored_twice_is_refused(tmp_path):
    ref = random_head(_llama().config, layers=1)
    path = write_published(ref, tmp_path / "twice", taps=True)
    w = load_file(str(path / "model.safetensors"))
    w["midlayer.input_layernorm.weight"] = w["layers.0.input_layernorm.weight"].clone()
    save_file(w, str(path / "model.safetensors"))
    with pytest.raises(PeagleError, match="stores layer 0 twice"):
        PEagleDrafter.from_pretrained(path, target=_llama())


# ------------------------------------------------------------------------------------------ hub ids
def test_a_hub_id_offline_is_one_error_naming_the_fetch_command(monkeypatch):
    calls = []

    def fake_download(repo_id, **kw):
        calls.append(kw)
        from huggingface_hub.errors import LocalEntryNotFoundError

        raise LocalEntryNotFoundError("not in the cache")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.snapshot_download", fake_download)
    with pytest.raises(PeagleError, match=r"offline.*`hf download amazon/GPT-OSS-20B-P-EAGLE --local-dir "
                                          r"heads/GPT-OSS-20B-P-EAGLE` .*, then `--head heads/GPT-OSS-20B-P-EAGLE`"):
        hub.head_path("amazon/GPT-OSS-20B-P-EAGLE")
    assert len(calls) == 1 and calls[0]["local_files_only"] is True  # the cache only, once


def test_a_hub_id_without_network_is_one_error_not_a_retry(monkeypatch):
    calls = []

    def fake_download(repo_id, **kw):
        calls.append(repo_id)
        raise ConnectionError("Network is unreachable")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.snapshot_download", fake_download)
    with pytest.raises(PeagleError, match=r"could not be downloaded \(ConnectionError: Network is unreachable\)"):
        head_for_target("amazon/gpt-oss-120b-p-eagle", _llama())
    assert calls == ["amazon/gpt-oss-120b-p-eagle"]


def test_a_hub_id_is_fetched_and_loaded_where_the_hub_answers(monkeypatch, tmp_path):
    target = _llama()
    ref = random_head(target.config, layers=2)
    local = write_published(ref, tmp_path / "snapshot", taps=True)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.snapshot_download", lambda repo_id, **kw: str(local))
    head, info = head_for_target("someone/tiny-p-eagle", target)
    assert info["source"] == "someone/tiny-p-eagle" and info["origin"] == "given"
    assert torch.equal(logits(head, 96, 96), logits(ref, 96, 96))


def test_head_for_target_names_the_published_head_of_the_seeds_targets(monkeypatch, tmp_path):
    assert hub.published_head_for("openai/gpt-oss-20b") == "amazon/GPT-OSS-20B-P-EAGLE"
    assert hub.published_head_for("/models/gpt-oss-120b") == "amazon/gpt-oss-120b-p-eagle"
    assert hub.published_head_for("Qwen/Qwen3-Coder-30B-A3B-Instruct") == "amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE"
    assert hub.published_head_for("HuggingFaceTB/SmolLM2-135M-Instruct") is None
    target = _llama()
    monkeypatch.setenv("PEAGLE_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(heads_mod, "cached_head", lambda hub_id: None)
    with pytest.raises(PeagleError, match=r"the P-EAGLE head published for it is amazon/GPT-OSS-20B-P-EAGLE "
                                          r"\(fetch it: `hf download"):
        head_for_target("parallel", target, target="openai/gpt-oss-20b", allow_fresh=False)
    cached = write_published(random_head(target.config, layers=2), tmp_path / "cache", taps=True)
    monkeypatch.setattr(heads_mod, "cached_head", lambda hub_id: cached)
    head, info = head_for_target("parallel", target, target="openai/gpt-oss-20b", allow_fresh=False)
    assert (info["origin"], info["source"]) == ("published", "amazon/GPT-OSS-20B-P-EAGLE")


# ------------------------------------------------------------------------------------------ the CLI, before the target
@pytest.fixture
def no_model_load(monkeypatch):
    import peagle_lab.models as models

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the head was checked")

    monkeypatch.setattr(models, "load_target", boom)


def test_generate_with_a_hub_id_offline_is_one_error_line_before_the_target_loads(no_model_load, capsys,
                                                                                   monkeypatch):
    from peagle_lab.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = main(["generate", "hi", "--head", "amazon/GPT-OSS-20B-P-EAGLE"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "hf download amazon/GPT-OSS-20B-P-EAGLE --local-dir" in err[0] and "--head heads/" in err[0]


def test_generate_refuses_a_misfit_head_before_the_target_loads(no_model_load, capsys, tmp_path, byte_tokenizer):
    from peagle_lab.cli import main

    vocab = len(byte_tokenizer)
    make_tiny_llama(hidden=32, layers=4, vocab=vocab).save_pretrained(tmp_path / "target")
    byte_tokenizer.save_pretrained(tmp_path / "target")
    small = make_tiny_llama(hidden=16, layers=2, heads=2, kv_heads=1, vocab=50)
    head = write_published(random_head(small.config, layers=1), tmp_path / "other", taps=True)
    capsys.readouterr()  # the target's save bars
    rc = main(["generate", "hi", "--head", str(head), "--target", str(tmp_path / "target")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert f"vocabulary 50 (head) vs {vocab} (target)" in err[0] and "hidden size 16 (head) vs 32 (target)" in err[0]


def test_vllm_takes_a_published_layout_head_as_it_is(tmp_path):
    head = random_head(_llama().config, layers=2)
    path = write_published(head, tmp_path / "published", taps=True)
    assert serving.speculative_config(path, 7) == {"method": "eagle3", "model": str(path),
                                                   "num_speculative_tokens": 7, "parallel_drafting": True}
    d = published_config(head, taps=True)
    del d["ptd_token_id"]
    (path / "config.json").write_text(json.dumps(d))
    assert "parallel_drafting" not in serving.speculative_config(path, 3)  # no mask token: an EAGLE-3 head


@pytest.mark.parametrize("layers", [2, 4])
def test_heads_trained_here_export_and_load_both_ways_with_identical_logits(tmp_path, layers):
    from peagle_lab.training import TrainConfig, prepare_sequences, train_head

    target = make_tiny_llama(hidden=32, layers=4, vocab=96)
    target.save_pretrained(tmp_path / "target")
    gen = torch.Generator().manual_seed(0)
    records = [{"input_ids": torch.randint(4, 96, (22,), generator=gen).tolist(), "prompt_len": 5} for _ in range(4)]
    cfg = TrainConfig(num_depths=4, layers=layers, draft_vocab_size=None, steps=3, lr=3e-3, warmup_steps=1,
                      batch_tokens=48, row_tokens=48, mask_token_id=MASK, save_every=0, seed=0, autocast="float32")
    trained = train_head(cfg, target, prepare_sequences(target, records, progress=False), out_dir=tmp_path / "head",
                         progress=False, verbose=False)
    native = PEagleDrafter.from_pretrained(tmp_path / "head", target=target)  # as trained, stored in bf16
    assert native.config.num_hidden_layers == layers and trained.head.config.num_hidden_layers == layers
    want = logits(native, 96, 96, k=4)
    exported = serving.export_vllm(tmp_path / "head", tmp_path / "vllm", target=tmp_path / "target")
    assert torch.equal(logits(PEagleDrafter.from_pretrained(exported, target=target), 96, 96, k=4), want)
    published = write_published(native, tmp_path / "published", taps=True)  # vLLM's layers.0. names
    back = PEagleDrafter.from_pretrained(published, target=target)
    assert torch.equal(logits(back, 96, 96, k=4), want)
    back.config.target = str(tmp_path / "target")
    again = serving.export_vllm(back.save_pretrained(tmp_path / "resaved", dtype=torch.float32), tmp_path / "vllm2")
    assert torch.equal(logits(PEagleDrafter.from_pretrained(again, target=target), 96, 96, k=4), want)


def test_a_speculators_eagle3_config_reads_as_vllm_reads_it():
    head = random_head(_llama().config, layers=1, taps=(1, 4, 6))
    d = speculators_config(head, kind="eagle3", k=3)
    del d["norm_before_residual"], d["mask_token_id"]
    cfg = PEagleConfig.from_json_dict(d)
    assert (cfg.mode, cfg.norm_before_residual, cfg.num_speculative_tokens) == ("sequential", True, 3)  # vLLM's default
    assert cfg.aux_hidden_state_layer_ids == (1, 4, 6)
    with pytest.raises(PeagleError, match="speculators 'dflash' head"):
        PEagleConfig.from_json_dict({**d, "speculators_model_type": "dflash"})


def test_a_published_heads_trained_k_comes_from_its_model_card(tmp_path):
    target = _llama()
    head = random_head(target.config, layers=1)
    cache = write_published(head, tmp_path / "models--amazon--GPT-OSS-20B-P-EAGLE" / "snapshots" / "abc", taps=True)
    local = write_published(head, tmp_path / "heads" / "gpt-oss-120b-p-eagle", taps=True)
    other = write_published(head, tmp_path / "heads" / "mine", taps=True)
    assert [heads_mod.load_head(p, target).config.num_speculative_tokens for p in (cache, local, other)] == [10, 8, 8]
    assert hub.card_trained_k(local) == 8 and hub.card_trained_k(other) is None  # other's 8 is the default


# ------------------------------------------------------------------------------------------ vLLM reads it the same way
@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_and_our_loop_draft_the_same_from_a_published_layout_head(tmp_path, smollm2):
    """The shipped P-EAGLE head rewritten as the published heads are stored (layers.0., ptd_token_id only, no
    taps: vLLM's default (2, 15, 27) for SmolLM2's 30 layers): vLLM and our loop give the same greedy tokens and
    the same acceptance counts on the same prompts and K."""
    pytest.importorskip("vllm")
    from peagle_lab.decoding.speculative import SpecStats
    from peagle_lab.drafter.heads import SHIPPED
    from peagle_lab.prompts import chat_ids

    model, tok = smollm2
    tdir = serving.export_target()
    exported = serving.export_vllm(SHIPPED["parallel"], tmp_path / "vllm", target=tdir)
    d = json.loads((exported / "config.json").read_text())
    keep = {k: v for k, v in d.items() if k not in ("peagle_export", "eagle_config", "num_aux_hidden_states",
                                                     "eagle_aux_hidden_state_layer_ids", "mask_token_id")}
    published = tmp_path / "published"
    published.mkdir()
    (published / "config.json").write_text(json.dumps(keep))
    w = load_file(str(exported / "model.safetensors"))
    save_file({("layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k): v for k, v in w.items()},
              str(published / "model.safetensors"))
    head, _ = head_for_target(str(published), model)
    assert head.config.aux_hidden_state_layer_ids == (2, 15, 27) and head.config.mask_token_id == d["ptd_token_id"]
    k, n = 3, 24
    prompts = [chat_ids(tok, q) for q in ("Write a Python function that reverses a list.", "What is 12 * 7?")]
    runner, ours, ours_ids = TargetRunner(model, head.config.aux_hidden_state_layer_ids), SpecStats(k=k), []
    for ids in prompts:
        res = speculative_generate(runner, HeadDrafter(head, "parallel"), ids, k, n)
        ours_ids.append(res.tokens)
        for a in res.stats.accepted:
            ours.add_round(a, k)
    from vllm import SamplingParams

    llm = serving.make_llm(tdir, serving.Speculation(published, k=k), max_model_len=512, dtype=torch.float32)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                        SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True), use_tqdm=False)
    metrics = serving.spec_metrics(llm)
    del llm
    print(f"acceptance length: vLLM {metrics['acceptance_length']:.3f}, ours {ours.acceptance_length:.3f} "
          f"({metrics['drafts']:.0f} vs {ours.rounds} rounds)")
    assert [list(o.outputs[0].token_ids) for o in outs] == ours_ids
    assert metrics["accepted"] > 0
    assert abs(metrics["acceptance_length"] - ours.acceptance_length) <= 0.05 * ours.acceptance_length
