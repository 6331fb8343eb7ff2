"""A target's identities read from its safetensors (8 embedding rows and the final norm, nothing else) equal the
ones of the loaded model, in fp32 and bf16, single-file and sharded; ``distill --engine vllm`` records them without
loading the target, and loads it (saying so) only when the checkpoint does not name those tensors."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from conftest import CHATML_TEMPLATE, make_byte_tokenizer, make_tiny_llama
from peagle_lab.features.identity import checkpoint_identities, target_fingerprint, target_identity
from peagle_lab.tiny_target import build_model, spec_for

DTYPES = (torch.float32, torch.bfloat16)


def _loaded(path, dtype):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return target_fingerprint(model), target_identity(model)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_the_embedded_targets_identities_from_its_files_equal_the_loaded_ones(dtype):
    from peagle_lab.models import convert_default

    path = convert_default()
    assert checkpoint_identities(path, dtype) == _loaded(path, dtype)


@pytest.mark.parametrize("arch", ["qwen3", "gpt-oss"])
@pytest.mark.parametrize("stored", DTYPES, ids=["stored-fp32", "stored-bf16"])
def test_a_tiny_targets_identities_from_its_files_equal_the_loaded_ones_sharded_or_not(tmp_path, arch, stored):
    model = build_model(spec_for(arch), vocab_size=512, eos_id=1, pad_id=0).to(stored)
    model.save_pretrained(tmp_path / "one")
    model.save_pretrained(tmp_path / "sharded", max_shard_size="200KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    assert len(list((tmp_path / "sharded").glob("*.safetensors"))) > 2
    for dtype in DTYPES:
        want = _loaded(tmp_path / "one", dtype)
        assert checkpoint_identities(tmp_path / "one", dtype) == want
        assert checkpoint_identities(tmp_path / "sharded", dtype) == want
    fp32, bf16 = (checkpoint_identities(tmp_path / "one", d) for d in DTYPES)
    assert fp32[1] == bf16[1] == bf16[0]  # the identity is the same in every dtype; a bf16 copy's fingerprint too


def test_only_the_8_embedding_rows_and_the_norm_enter_the_identity(tmp_path):
    model = make_tiny_llama(hidden=32, layers=1, vocab=64, max_positions=32)
    model.save_pretrained(tmp_path / "a")
    before = checkpoint_identities(tmp_path / "a", torch.float32)
    with torch.no_grad():
        model.get_input_embeddings().weight[8:] += 1
        model.model.layers[0].mlp.up_proj.weight += 1
    model.save_pretrained(tmp_path / "b")
    assert checkpoint_identities(tmp_path / "b", torch.float32) == before
    with torch.no_grad():
        model.model.norm.weight[0] += 1
    model.save_pretrained(tmp_path / "c")
    assert checkpoint_identities(tmp_path / "c", torch.float32) != before


@pytest.mark.parametrize("names", [{"transformer.wte.weight": (64, 8), "transformer.ln_f.weight": (8,)},
                                   {"model.embed_tokens.weight": (64, 8)},
                                   {"a.embed_tokens.weight": (64, 8), "b.embed_tokens.weight": (64, 8),
                                    "a.norm.weight": (8,)},
                                   {"model.embed_tokens.weight": (64, 8), "model.norm.weight": (9,)}],
                         ids=["other-names", "no-norm", "two-embeddings", "norm-of-another-width"])
def test_a_checkpoint_whose_tensors_cannot_be_told_by_name_gives_none(tmp_path, names):
    save_file({n: torch.ones(shape) for n, shape in names.items()}, str(tmp_path / "model.safetensors"))
    assert checkpoint_identities(tmp_path, torch.float32) is None


def test_a_directory_without_safetensors_or_with_a_damaged_index_gives_none(tmp_path):
    assert checkpoint_identities(tmp_path, torch.float32) is None
    (tmp_path / "model.safetensors.index.json").write_text("{not json")
    assert checkpoint_identities(tmp_path, torch.float32) is None
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.embed_tokens.weight": "gone.safetensors", "model.norm.weight": "gone.safetensors"}}))
    assert checkpoint_identities(tmp_path, torch.float32) is None


class _Engine:
    """vLLM stood in: answers every prompt with EOS, records what it was started with."""
    started: list = []

    def __init__(self, target_dir, eos_ids, max_model_len, dtype, seed=0):
        self.version, self.start_s, self.eos = "stand-in", 0.0, min(eos_ids)
        _Engine.started.append((target_dir, dtype))

    def generate(self, prompts_ids, max_new_tokens):
        return [[self.eos] for _ in prompts_ids]


@pytest.fixture
def vllm_distill(tmp_path, monkeypatch):
    """``distill --engine vllm`` on a tiny target with vLLM stood in: ``(argv, target directory)``."""
    from peagle_lab.distill import engines as distill_engines

    tok = make_byte_tokenizer(CHATML_TEMPLATE)
    make_tiny_llama(hidden=32, layers=2, vocab=len(tok), max_positions=128).save_pretrained(tmp_path / "target")
    tok.save_pretrained(tmp_path / "target")
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["first", "second"]))
    monkeypatch.setattr(distill_engines, "vllm_available", lambda: True)
    monkeypatch.setattr(distill_engines, "VllmEngine", _Engine)
    _Engine.started = []
    argv = ["distill", "--prompts-file", str(tmp_path / "p.jsonl"), "--out", str(tmp_path / "d.jsonl"), "--target",
            str(tmp_path / "target"), "--dtype", "float32", "--engine", "vllm", "--max-new-tokens", "4"]
    return argv, tmp_path / "target"


def test_distill_with_vllm_records_the_targets_identities_without_loading_it(vllm_distill, monkeypatch, tmp_path):
    from peagle_lab import models
    from peagle_lab.cli import main
    from peagle_lab.distill.data import read_distilled

    argv, target = vllm_distill
    monkeypatch.setattr(models, "load_target", lambda *a, **k: pytest.fail("the target was loaded"))
    assert main(argv) == 0
    meta, records = read_distilled(tmp_path / "d.jsonl")
    fp, ident = _loaded(target, torch.float32)
    assert (meta["target_fingerprint"], meta["target_identity"]) == (fp, ident)
    assert len(records) == 2 and _Engine.started == [(str(target), torch.float32)]


def test_distill_with_vllm_loads_the_target_and_says_so_when_its_files_cannot_fingerprint_it(
        vllm_distill, monkeypatch, tmp_path, capsys):
    from peagle_lab import models
    from peagle_lab.cli import main
    from peagle_lab.cli import distill as distill_mod
    from peagle_lab.distill.data import read_distilled

    argv, target = vllm_distill
    loads = []
    real = models.load_target
    monkeypatch.setattr(distill_mod, "checkpoint_identities", lambda *a: None)
    monkeypatch.setattr(models, "load_target", lambda *a, **k: loads.append(k) or real(*a, **k))
    assert main(argv) == 0
    assert "loading the target on the CPU to fingerprint it" in capsys.readouterr().err
    assert loads == [dict(device="cpu", dtype=torch.float32)]
    meta, _ = read_distilled(tmp_path / "d.jsonl")
    assert (meta["target_fingerprint"], meta["target_identity"]) == _loaded(target, torch.float32)


def test_distill_with_vllm_on_a_gpu_runs_the_engine_in_the_gpus_dtype_not_the_cpus(vllm_distill, monkeypatch,
                                                                                   tmp_path):
    """On an sm_90 GPU (stood in) with --dtype auto, vLLM gets bf16 and the file records a bf16 copy's identities."""
    from peagle_lab import models, precision
    from peagle_lab.cli import main
    from peagle_lab.distill.data import read_distilled

    argv, target = vllm_distill
    argv = [a for a in argv if a not in ("--dtype", "float32")] + ["--dtype", "auto", "--device", "cuda"]
    monkeypatch.setattr(models, "pick_device", lambda device=None: torch.device(device or "cuda"))
    monkeypatch.setattr(precision, "cuda_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(models, "load_target", lambda *a, **k: pytest.fail("the target was loaded"))
    assert main(argv) == 0
    assert _Engine.started == [(str(target), torch.bfloat16)]
    meta, _ = read_distilled(tmp_path / "d.jsonl")
    assert (meta["target_fingerprint"], meta["target_identity"]) == _loaded(target, torch.bfloat16)
