"""The drafter module: vLLM-layout checkpoints, cache consistency, one-pass parallel drafting, bad input."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from peagle_lab.decoding.draft_sources import HeadDrafter
from peagle_lab.drafter import PEagleConfig, PEagleDrafter
from peagle_lab.errors import PeagleError
from peagle_lab.decoding.sampling import Sampling
from peagle_lab.decoding.slots import Slots


def make_head(target, layers=2, draft_vocab=None, mode="parallel", seed=0, shared=False):
    torch.manual_seed(seed)
    cfg = PEagleConfig.from_target(target.config, num_hidden_layers=layers, draft_vocab_size=draft_vocab,
                                   mask_token_id=3, mode=mode, embed_shared_with_target=shared)
    head = PEagleDrafter(cfg).eval()
    if draft_vocab:
        head.set_draft_vocab(torch.arange(target.config.vocab_size)[-draft_vocab:])
    return head


def test_incremental_cache_equals_one_full_forward(tiny_llama):
    target = tiny_llama()
    head = make_head(target)
    T, H = 11, target.config.hidden_size
    ids = torch.randint(0, 96, (1, T))
    hidden = torch.randn(1, T, H)
    pos = torch.arange(T)[None]
    full, full_pre = head(ids, hidden, pos)
    cache = head.new_cache()
    parts = []
    for a, b in [(0, 4), (4, 5), (5, 11)]:
        logits, _ = head(ids[:, a:b], hidden[:, a:b], pos[:, a:b], cache=cache)
        parts.append(logits)
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-5, atol=1e-5)
    cache.crop(5)
    again, _ = head(ids[:, 5:], hidden[:, 5:], pos[:, 5:], cache=cache)
    torch.testing.assert_close(again, full[:, 5:], rtol=1e-5, atol=1e-5)


def test_parallel_draft_is_one_pass_over_context_and_mask_slots(tiny_llama):
    """Slot 1 = [emb(last token), h_context]; slots 2..K = mask embedding + fc(mask_hidden), positions start+j."""
    target = tiny_llama()
    head = make_head(target)
    n, k = 6, 5
    toks = torch.randint(3, 96, (n,))
    taps = torch.randn(n, 3 * target.config.hidden_size)
    drafts, _ = HeadDrafter(head, "parallel").propose(Slots(toks.tolist(), taps), k, Sampling())
    mask = head.config.mask_token_id
    ids = torch.cat([toks, torch.full((k - 1,), mask)])[None]
    hidden = torch.cat([head.fuse(taps), head.fc(head.mask_hidden)[0].expand(k - 1, -1)])[None]
    logits, _ = head(ids, hidden, torch.arange(n + k - 1)[None])
    assert drafts.tolist() == logits[0, n - 1:].argmax(-1).tolist()


def test_sequential_draft_feeds_back_token_and_prenorm(tiny_llama):
    target = tiny_llama()
    head = make_head(target, mode="sequential")
    n, k = 4, 3
    toks = torch.randint(3, 96, (n,))
    taps = torch.randn(n, 3 * target.config.hidden_size)
    drafts, _ = HeadDrafter(head).propose(Slots(toks.tolist(), taps), k, Sampling())
    ids, hidden = toks[None], head.fuse(taps)[None]
    expect = []
    for j in range(k):  # no cache: recompute the whole chain every step
        logits, pre = head(ids, hidden, torch.arange(ids.shape[1])[None])
        tok = logits[0, -1].argmax()
        expect.append(int(tok))
        ids = torch.cat([ids, tok.view(1, 1)], 1)
        hidden = torch.cat([hidden, pre[:, -1:]], 1)
    assert drafts.tolist() == expect


def test_checkpoint_uses_vllm_eagle3_names_and_round_trips(tiny_llama, tmp_path):
    target = tiny_llama()
    head = make_head(target, layers=3, draft_vocab=32)
    head.save_pretrained(tmp_path, dtype=None)
    sd = load_file(str(tmp_path / "model.safetensors"))
    H = target.config.hidden_size
    assert sd["mask_hidden"].shape == (1, 1, 3 * H)  # mask_hidden is stored BEFORE fc
    assert sd["fc.weight"].shape == (H, 3 * H)
    assert sd["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * H
    assert sd["layers.2.self_attn.q_proj.weight"].shape[1] == H
    assert "midlayer.hidden_norm.weight" in sd and "layers.1.mlp.gate_proj.weight" in sd
    assert sd["lm_head.weight"].shape == (32, H) and sd["d2t"].dtype == torch.int64
    assert "embed_tokens.weight" in sd
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["mask_token_id"] == cfg["ptd_token_id"] == 3
    assert cfg["draft_vocab_size"] == 32 and cfg["target_hidden_size"] == H
    loaded = PEagleDrafter.from_pretrained(tmp_path, target=target)
    for k, v in head.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[k], v)


def test_shared_embedding_checkpoint_stores_only_the_mask_row(tiny_llama, tmp_path):
    target = tiny_llama()
    head = make_head(target, shared=True)
    head.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight)
    head.embed_tokens.weight.data[3] = 7.0
    head.save_pretrained(tmp_path, dtype=None)
    sd = load_file(str(tmp_path / "model.safetensors"))
    assert "embed_tokens.weight" not in sd and sd["mask_embedding"].shape == (target.config.hidden_size,)
    with pytest.raises(PeagleError, match="target="):
        PEagleDrafter.from_pretrained(tmp_path)
    loaded = PEagleDrafter.from_pretrained(tmp_path, target=target)
    torch.testing.assert_close(loaded.embed_tokens.weight, head.embed_tokens.weight)


def test_full_vocabulary_head_works_without_d2t(tiny_llama, tmp_path):
    target = tiny_llama()
    head = make_head(target, draft_vocab=None)
    head.save_pretrained(tmp_path)
    assert "d2t" not in load_file(str(tmp_path / "model.safetensors"))
    loaded = PEagleDrafter.from_pretrained(tmp_path, target=target)
    assert loaded.config.draft_vocab_size == target.config.vocab_size


@pytest.mark.parametrize("layers, draft_vocab, shared", [(1, None, True), (2, 64, False), (3, 64, True)])
def test_the_checkpoint_layout_from_the_config_is_the_networks(tiny_llama, layers, draft_vocab, shared):
    """check_head_dir reads the expected tensors off the config (drafter.checkpoint builds no network): they are
    the ones a head of that config stores."""
    from peagle_lab.drafter.checkpoint import _as_stored, state_shapes

    head = make_head(tiny_llama(), layers=layers, draft_vocab=draft_vocab, shared=shared)
    assert state_shapes(head.config) == {k: tuple(v.shape) for k, v in head.state_dict().items()}
    stored = {k: tuple(v.shape) for k, v in head.export_state_dict().items()}
    assert _as_stored(head.config, state_shapes(head.config), lambda shape: shape[1:]) == stored


def test_disagreeing_mask_token_ids_are_refused_by_name(tiny_llama):
    d = make_head(tiny_llama()).config.to_json_dict()
    with pytest.raises(PeagleError, match=r"mask token ids disagree \(\{'mask_token_id': 3, 'ptd_token_id': 4\}\)"):
        PEagleConfig.from_json_dict({**d, "ptd_token_id": 4})
    with pytest.raises(PeagleError, match="'pard_token' must be an integer token id"):
        PEagleConfig.from_json_dict({**d, "pard_token": [3]})


def test_head_for_another_vocabulary_or_hidden_size_is_refused(tiny_llama, tmp_path):
    target = tiny_llama()
    other_vocab = tiny_llama(vocab=128)
    other_hidden = tiny_llama(hidden=48)
    make_head(other_vocab).save_pretrained(tmp_path / "v")
    make_head(other_hidden).save_pretrained(tmp_path / "h")
    with pytest.raises(PeagleError, match="vocabulary 128 .head. vs 96 .target."):
        PEagleDrafter.from_pretrained(tmp_path / "v", target=target)
    with pytest.raises(PeagleError, match="hidden size 48"):
        PEagleDrafter.from_pretrained(tmp_path / "h", target=target)


def test_missing_misshaped_and_corrupt_checkpoints_name_the_problem(tiny_llama, tmp_path):
    target = tiny_llama()
    head = make_head(target)
    head.save_pretrained(tmp_path / "ok", dtype=None)
    sd = load_file(str(tmp_path / "ok" / "model.safetensors"))
    for name, mutate, pattern in [
        ("missing", lambda d: d.pop("mask_hidden"), r"missing tensors \['mask_hidden'\]"),
        ("misshaped", lambda d: d.__setitem__("fc.weight", torch.zeros(3, 3)), r"misshaped tensors fc.weight"),
    ]:
        bad = dict(sd)
        mutate(bad)
        (tmp_path / name).mkdir()
        save_file(bad, str(tmp_path / name / "model.safetensors"))
        (tmp_path / name / "config.json").write_text((tmp_path / "ok" / "config.json").read_text())
        with pytest.raises(PeagleError, match=pattern):
            PEagleDrafter.from_pretrained(tmp_path / name, target=target)
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "config.json").write_text((tmp_path / "ok" / "config.json").read_text())
    (tmp_path / "corrupt" / "model.safetensors").write_bytes(b"\x00\x01 not a safetensors file")
    with pytest.raises(PeagleError, match="corrupt"):
        PEagleDrafter.from_pretrained(tmp_path / "corrupt", target=target)
    with pytest.raises(PeagleError, match="not a drafter checkpoint"):
        PEagleDrafter.from_pretrained(tmp_path / "nowhere", target=target)
    cfg = json.loads((tmp_path / "ok" / "config.json").read_text())
    del cfg["mask_token_id"], cfg["ptd_token_id"]
    (tmp_path / "ok" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PeagleError, match="no mask token id"):
        PEagleDrafter.from_pretrained(tmp_path / "ok", target=target)


def test_k_outside_1_to_64_is_an_error_and_k_above_training_is_a_note(tiny_llama):
    from peagle_lab.decoding.draft_sources import HeadDrafter
    from peagle_lab.decoding.speculative import speculative_generate
    from peagle_lab.decoding.target_runner import TargetRunner

    model = tiny_llama()
    head = make_head(model)
    runner = TargetRunner(model, head.config.aux_hidden_state_layer_ids)
    for bad in (0, -3, 2.5, True, 65):
        with pytest.raises(PeagleError, match="K"):
            speculative_generate(runner, HeadDrafter(head), [1, 2, 3], bad, 4)
    assert HeadDrafter(head).notes(head.config.num_speculative_tokens + 1)[0].startswith(
        f"K={head.config.num_speculative_tokens + 1} exceeds")


def test_tap_ids_out_of_range_are_refused(tiny_llama):
    target = tiny_llama(layers=4)
    with pytest.raises(PeagleError, match=r"out of range for a target with 4 layers"):
        PEagleConfig.from_target(target.config, aux_layer_ids=(1, 2, 9))


# ------------------------------------------------------------------------------------------ RoPE of the target
ROPES = {
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 128},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
}


def scaled_target(rope):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, max_position_embeddings=512, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, rope_parameters=dict(rope))
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval().requires_grad_(False)


@pytest.mark.parametrize("kind", list(ROPES))
def test_head_rope_is_the_targets_scaled_rope(kind):
    from peagle_lab.drafter import rope_cos_sin

    target = scaled_target(ROPES[kind])
    head = make_head(target)
    pos = torch.arange(0, 700, 7)[None]  # beyond the original context and (dynamic) beyond max positions
    # the head's attention honours the scaling: its output differs from the same weights under plain RoPE
    with torch.no_grad():  # sharp attention, so positions matter
        for layer in head.decoder_layers:
            layer.self_attn.q_proj.weight.mul_(40.0)
            layer.self_attn.k_proj.weight.mul_(40.0)
    unscaled = {k: v for k, v in head.config.to_json_dict().items() if k not in ("rope_parameters", "rope_scaling")}
    plain_head = PEagleDrafter(PEagleConfig.from_json_dict(unscaled))
    plain_head.load_state_dict(head.state_dict())
    ids, hidden = torch.randint(0, 96, (1, 100)), torch.randn(1, 100, 32)
    assert not torch.allclose(head(ids, hidden, pos)[0], plain_head(ids, hidden, pos)[0], atol=1e-3)
    # exactly the target's own rotary tables (transformers' LlamaRotaryEmbedding for its config)
    assert head.config.rope_parameters["rope_type"] == kind
    cos, sin = head.rotary(pos, torch.float32)
    ref_cos, ref_sin = target.model.rotary_emb(torch.empty(0), pos)
    assert torch.equal(cos[:, 0], ref_cos) and torch.equal(sin[:, 0], ref_sin)
    plain_cos, plain_sin = rope_cos_sin(pos, 8, ROPES[kind]["rope_theta"], torch.float32)
    assert not torch.allclose(cos, plain_cos, atol=1e-3) or not torch.allclose(sin, plain_sin, atol=1e-3)


def test_scaled_rope_round_trips_through_config_json_and_the_vllm_export(tmp_path):
    from peagle_lab import serving

    target = scaled_target(ROPES["llama3"])
    target.save_pretrained(tmp_path / "target")
    head = make_head(target, shared=True).init_from_target(target)
    head.save_pretrained(tmp_path / "head", dtype=torch.float32)
    saved = json.loads((tmp_path / "head" / "config.json").read_text())
    assert saved["rope_parameters"] == head.config.rope_parameters
    assert saved["rope_parameters"] == {**ROPES["llama3"]}  # exactly the target's (already standardised) dict
    assert saved["rope_theta"] == 500000.0
    loaded = PEagleDrafter.from_pretrained(tmp_path / "head", target=target)
    assert loaded.config.rope_parameters == head.config.rope_parameters
    ids, hidden, pos = torch.randint(0, 96, (1, 9)), torch.randn(1, 9, 32), torch.arange(200, 209)[None]
    assert torch.equal(loaded(ids, hidden, pos)[0], head(ids, hidden, pos)[0])
    out = serving.export_vllm(tmp_path / "head", tmp_path / "vllm", target=tmp_path / "target")
    exported = json.loads((out / "config.json").read_text())
    assert exported["rope_parameters"] == head.config.rope_parameters
    assert PEagleDrafter.from_pretrained(out).config.rope_parameters == head.config.rope_parameters


def test_config_json_without_rope_parameters_loads_with_plain_rope(tiny_llama, tmp_path):
    """Heads saved before the field existed (the shipped ones among them): plain RoPE with rope_theta, exactly."""
    from peagle_lab.drafter import rope_cos_sin

    target = tiny_llama()
    head = make_head(target)
    head.save_pretrained(tmp_path, dtype=torch.float32)
    d = json.loads((tmp_path / "config.json").read_text())
    assert d["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}
    del d["rope_parameters"]
    (tmp_path / "config.json").write_text(json.dumps(d))
    old = PEagleDrafter.from_pretrained(tmp_path)
    assert old.config.rope_parameters == {"rope_type": "default", "rope_theta": 10000.0}
    pos = torch.arange(50)[None]
    cos, sin = old.rotary(pos, torch.float32)
    ref = rope_cos_sin(pos, 8, 10000.0, torch.float32)
    assert torch.equal(cos, ref[0]) and torch.equal(sin, ref[1])
    ids, hidden = torch.randint(0, 96, (1, 50)), torch.randn(1, 50, 32)
    assert torch.equal(old(ids, hidden, pos)[0], head(ids, hidden, pos)[0])


def test_bad_rope_parameters_are_refused_by_name(tiny_llama):
    d = make_head(tiny_llama()).config.to_json_dict()
    for bad, match in [({"rope_type": "spiral"}, "rope_type"), ("llama3", "must be an object"),
                       ({"rope_type": "default", "rope_theta": 5.0}, "disagrees")]:
        with pytest.raises(PeagleError, match=match):
            PEagleConfig.from_json_dict({**d, "rope_parameters": bad})
    with pytest.raises(PeagleError, match="cannot build the rotary embedding"):
        PEagleDrafter(PEagleConfig.from_json_dict({**d, "rope_parameters": {"rope_type": "llama3"}}))


# ---- transformers' Llama modules inside the head (norms, MLP, rotary), same weights names, same numbers ----
def test_head_is_built_from_transformers_llama_modules(tiny_llama):
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

    head = make_head(tiny_llama(), layers=2)  # plain RoPE (rope_type default) too goes through transformers
    for layer in head.decoder_layers:
        assert isinstance(layer.mlp, LlamaMLP) and isinstance(layer.input_layernorm, LlamaRMSNorm)
        assert isinstance(layer.post_attention_layernorm, LlamaRMSNorm)
    assert isinstance(head.midlayer.hidden_norm, LlamaRMSNorm) and isinstance(head.norm, LlamaRMSNorm)
    assert isinstance(head.rotary.hf, LlamaRotaryEmbedding)
    assert head.midlayer.self_attn.q_proj.in_features == 2 * 32  # the 2H-input first layer stays our own
    # the state-dict keys the shipped heads and the vLLM export rely on
    layer_keys = ["input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                  "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                  "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]
    assert sorted(head.state_dict()) == sorted(
        ["embed_tokens.weight", "fc.weight", "mask_hidden", "midlayer.hidden_norm.weight", "norm.weight",
         "lm_head.weight", "d2t", "t2d"]
        + [f"midlayer.{k}" for k in layer_keys] + [f"layers.1.{k}" for k in layer_keys])


# logits[0, :, :4] of a fixed input, computed with the head's own RMSNorm / MLP / RoPE code before it used
# transformers' modules (fp32, CPU)
PINNED_TINY = [
    [-0.11716713, 0.059307113, -0.16276763, -0.17602615],
    [-0.10765491, 0.137447, 0.13172324, 0.096969441],
    [0.10120247, -0.12618406, -0.0045877998, -0.19602662],
    [-0.11081257, 0.11926831, 0.018440539, -0.02780137],
    [0.15581633, 0.1086561, 0.15487066, 0.15414746],
]
PINNED_SHIPPED = {
    "smollm2-135m-peagle": [
        [-4.664612, -0.628439, 12.237733, 4.925171],
        [-7.019563, -3.102497, 6.107417, 3.182092],
        [-4.70944, 0.599138, 13.762671, 9.737713],
        [-7.187539, -4.949792, 10.350142, 5.942214],
        [12.303362, 9.172305, 8.100974, 6.459952],
        [-15.841227, -7.712391, 7.906854, 6.932751],
    ],
    "smollm2-135m-eagle3": [
        [11.892376, 14.066362, 5.720113, 14.958235],
        [-8.787129, -9.711868, -4.126306, -17.056694],
        [-14.611404, -7.598913, -4.042347, -2.023236],
        [-11.763493, -6.003935, -2.472949, -17.279177],
        [8.480082, 10.430187, 0.271936, -4.637794],
        [0.423569, -12.374498, -14.166934, -18.862076],
    ],
}


def test_two_layer_head_logits_are_unchanged(tiny_llama):
    head = make_head(tiny_llama(), layers=2)  # covers the later (plain Llama) layers and GQA
    taps = torch.randn(1, 5, 3 * 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits, _ = head(torch.tensor([[5, 17, 42, 8, 77]]), head.fuse(taps), torch.arange(2, 7)[None])
    torch.testing.assert_close(logits[0, :, :4], torch.tensor(PINNED_TINY), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(PINNED_SHIPPED))
def test_shipped_head_logits_are_unchanged(name, smollm2):
    from peagle_lab.settings import REPO_ROOT

    path = REPO_ROOT / "data" / "heads" / name
    if not (path / "model.safetensors").exists():
        pytest.skip(f"{path} is not here")
    model, _ = smollm2
    head = PEagleDrafter.from_pretrained(path, target=model, device="cpu", dtype=torch.float32).eval()
    taps = torch.randn(1, 6, head.config.num_taps * head.config.target_hidden_size,
                       generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits, _ = head(torch.tensor([[1, 504, 3458, 314, 253, 1691]]), head.fuse(taps), torch.arange(3, 9)[None])
    # atol 1e-4: fp32 sums in another thread count differ in the last bits at |logit| ~ 10; any weight change moves more
    torch.testing.assert_close(logits[0, :, :4], torch.tensor(PINNED_SHIPPED[name]), atol=1e-4, rtol=0)
