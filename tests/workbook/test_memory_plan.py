"""Memory on a GPU, checked on the CPU: what each notebook holds at its peak for an 8B-shaped target (meta device,
no weights), the one line before a load that would not fit (CUDA's free memory faked), the dtype the notebooks
load their target in (a CUDA capability faked), and the notebooks' sources using it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from peagle_lab import memory, precision
from peagle_lab.errors import PeagleError
from peagle_lab.workbook import memory_plan

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
GIB = memory.GIB


def llama_8b_config():
    """Llama-3.1-8B's shapes (its config.json's numbers), nothing more."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                       rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False)


@pytest.fixture(scope="module")
def cfg_8b():
    return llama_8b_config()


def test_meta_count_of_the_8b_shapes_is_llama_3_1_8b(cfg_8b):
    assert memory.parameter_count(cfg_8b) == 8_030_261_248
    assert memory.weights_bytes(cfg_8b, torch.bfloat16) == 2 * 8_030_261_248


def test_every_notebook_fits_24_gib_with_an_8b_target_in_bf16(cfg_8b):
    peaks = memory_plan.notebook_peaks(cfg_8b, torch.bfloat16, gpu_bytes=24 * GIB)
    assert [p.notebook for p in peaks] == sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))
    over = [p.line() for p in peaks if p.total > 24 * GIB]
    assert not over, over
    assert memory_plan.vllm_problem(cfg_8b, torch.bfloat16, 24 * GIB) is None
    # the target alone is most of it: the plan counts it in every phase that runs a model; the results chapter runs
    # none, and 11 reads only the target's shape (its trainers run the tiny target)
    light = ("11_past_one_machine", "12_results")
    assert all(p.parts.get("target", 0) == memory.weights_bytes(cfg_8b, torch.bfloat16) or p.parts.get("vllm")
               for p in peaks if p.notebook not in light)
    assert [p.parts for p in peaks if p.notebook in light] == [{}, {}]


def test_an_8b_target_in_fp32_is_named_over_24_gib(cfg_8b):
    peaks = memory_plan.notebook_peaks(cfg_8b, torch.float32, gpu_bytes=24 * GIB)
    assert all(p.total > 24 * GIB for p in peaks if "target" in p.parts)
    assert "cannot hold" in memory_plan.vllm_problem(cfg_8b, torch.float32, 24 * GIB)
    lines = memory_plan.plan_lines(cfg_8b, torch.float32, 24 * GIB)
    assert sum(line.startswith("OVER") for line in lines) == sum(1 for p in peaks if p.parts)  # each that runs one


def test_a_trainer_of_the_8b_shapes_is_its_fp32_head_and_adam_state(cfg_8b):
    head, trainer = memory_plan._head_modules(cfg_8b, memory_plan.DRAFT_VOCAB)
    trainable = sum(p.numel() for p in trainer.parameters() if p.requires_grad)
    weights = sum(p.numel() for p in trainer.parameters())
    assert trainable < weights - head.embed_tokens.weight.numel() + 1  # the embedding is frozen
    assert memory_plan.trainer_bytes(cfg_8b) > 4 * weights + 12 * trainable


def _fake_cuda(monkeypatch, free_gib, total_gib=24.0):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(memory, "cuda_free", lambda dev: (int(free_gib * GIB), int(total_gib * GIB)))


def test_a_gpu_too_small_for_the_target_is_one_line_naming_need_and_free(monkeypatch, cfg_8b):
    _fake_cuda(monkeypatch, free_gib=10.0)
    with pytest.raises(PeagleError) as err:
        memory.check_target_fits(cfg_8b, torch.bfloat16, "cuda", "meta-llama/Llama-3.1-8B-Instruct")
    msg = str(err.value)
    assert "\n" not in msg and "15.0 GiB" in msg and "10.0 GiB free of 24.0 GiB" in msg and "Fix:" in msg
    _fake_cuda(monkeypatch, free_gib=20.0)
    memory.check_target_fits(cfg_8b, torch.bfloat16, "cuda", "x")  # fits: nothing said
    with pytest.raises(PeagleError, match="PEAGLE_DTYPE=auto"):
        memory.check_target_fits(cfg_8b, torch.float32, "cuda", "x")  # fp32 does not: the fix names auto
    memory.check_target_fits(cfg_8b, torch.float32, "cpu", "x")  # on the CPU nothing is refused


def test_load_target_refuses_before_reading_weights(monkeypatch, tmp_path, tiny_llama, byte_tokenizer):
    from transformers import AutoModelForCausalLM

    from peagle_lab import models

    tiny_llama().save_pretrained(tmp_path)
    byte_tokenizer.save_pretrained(tmp_path)
    _fake_cuda(monkeypatch, free_gib=0.0)
    monkeypatch.setattr(models, "pick_device", lambda device=None: torch.device("cuda"))

    def never(*a, **k):
        raise AssertionError("weights read although they cannot fit")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", never)
    with pytest.raises(PeagleError, match="needs .* of GPU memory; cuda has 0.0 GiB free"):
        models.load_target(str(tmp_path), device="cuda", dtype=torch.bfloat16)


@pytest.mark.parametrize("capability, expected", [((9, 0), torch.bfloat16), ((8, 6), torch.bfloat16),
                                                  ((7, 5), torch.float16)])
def test_course_dtype_on_cuda_is_auto(monkeypatch, capability, expected):
    monkeypatch.delenv("PEAGLE_DTYPE", raising=False)
    monkeypatch.setattr(precision, "cuda_capability", lambda dev: capability)
    assert precision.course_dtype("cuda") == expected


def test_course_dtype_on_a_cpu_is_fp32_even_with_native_bf16(monkeypatch):
    monkeypatch.delenv("PEAGLE_DTYPE", raising=False)
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda flags=None: "amx")
    assert precision.course_dtype("cpu") == torch.float32
    monkeypatch.setenv("PEAGLE_DTYPE", "bfloat16")  # asked for: honoured
    assert precision.course_dtype("cpu") == torch.bfloat16


def test_no_notebook_loads_its_target_in_a_fixed_fp32():
    loads = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py")):
        lines = path.read_text().splitlines()
        for before, line in zip([""] + lines, lines):
            if "load_target(" in line and not line.lstrip().startswith("#"):
                loads.append((path.name, before, line))
    assert len(loads) >= 9
    # a float32 copy only where the line before asks whether it fits (notebook 05's dtype comparison)
    fixed = [(n, line) for n, before, line in loads if re.search(r"dtype=torch\.float32\b", line)
             and "memory.fits(" not in before]
    assert not fixed, fixed


def test_ensure_heads_trains_each_missing_head_before_any_head_is_kept(monkeypatch):
    from peagle_lab.drafter import heads as heads_mod
    from peagle_lab.training import quick

    stored, events = {"parallel"}, []

    def head_for_target(kind, model, tokenizer=None, target=None, **kw):
        events.append(("look", kind))
        return object(), {"origin": "stored" if kind in stored else "fresh", "note": None}

    def ensure_head(kind, model, tokenizer, target, sizes=None):
        if kind not in stored:
            events.append(("train", kind))
            stored.add(kind)
        events.append(("keep", kind))
        return f"head-{kind}", {"origin": "stored", "note": None}

    monkeypatch.setattr(heads_mod, "head_for_target", head_for_target)
    monkeypatch.setattr(quick, "ensure_head", ensure_head)
    out = quick.ensure_heads(("parallel", "sequential"), None, None, "t")
    assert out == {k: (f"head-{k}", {"origin": "stored", "note": None}) for k in ("parallel", "sequential")}
    trained = events.index(("train", "sequential"))
    kept_after = [e for e in events[trained + 1:] if e[0] == "keep"]
    assert [e[1] for e in kept_after] == ["sequential", "parallel", "sequential"]  # the made one dropped, then all


def test_memory_plan_command_prints_every_notebook(tmp_path, capsys, cfg_8b):
    from peagle_lab.cli import main

    cfg_8b.save_pretrained(tmp_path)
    assert main(["memory-plan", "--target", str(tmp_path), "--gpu-gib", "24"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith(("fits", "OVER"))]
    assert len(rows) == len(memory_plan.PHASES) and all(r.startswith("fits") for r in rows)
    assert main(["memory-plan", "--target", str(tmp_path), "--gpu-gib", "16"]) == 0
    assert any(line.startswith("OVER") for line in capsys.readouterr().out.splitlines())


def test_the_readmes_8b_figure_is_the_plans(cfg_8b):
    readme = (NOTEBOOKS.parent / "README.md").read_text()
    quoted = float(re.search(r"the peak, ([0-9.]+) GiB", readme).group(1))
    peaks = memory_plan.notebook_peaks(cfg_8b, torch.bfloat16, gpu_bytes=24 * GIB)
    assert quoted == round(max(p.total for p in peaks) / GIB, 1)
    sagemaker = (NOTEBOOKS.parent / "docs" / "sagemaker.md").read_text()
    assert float(re.search(r"at most ([0-9.]+) GiB", sagemaker).group(1)) == quoted
