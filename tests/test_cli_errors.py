"""Bad CLI input: one clear error line (exit 2) naming the allowed range, before any model loads."""

from __future__ import annotations

import pytest
import torch

from peagle_lab.cli import main
from peagle_lab.errors import PeagleError


@pytest.fixture
def no_model_load(monkeypatch):
    import peagle_lab.models as models

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(models, "load_target", boom)


CASES = [
    (["-k", "0"], "K .*1..64"),
    (["-k", "1000", "--max-new-tokens", "8"], "K .*1..64"),
    (["--max-new-tokens", "-5"], "max_new_tokens .*>= 1"),
    (["--temperature", "-1"], "temperature .*>= 0"),
    (["--top-p", "0"], r"top_p .*\(0, 1\]"),
    (["--top-p", "1.5"], r"top_p .*\(0, 1\]"),
    (["--top-p", "-0.3"], r"top_p .*\(0, 1\]"),
    (["--threads", "-1"], "threads .*>= 1"),
    (["--device", "nonsense"], "Unknown device"),
]


@pytest.mark.parametrize("extra, message", CASES)
def test_generate_rejects_bad_arguments_before_loading(no_model_load, capsys, extra, message):
    rc = main(["generate", "hi", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("peagle-lab: error: "), err
    assert __import__("re").search(message, err[0]), err[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_on_a_cpu_only_machine_is_one_line(no_model_load, capsys):
    assert main(["generate", "hi", "--device", "cuda"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_float16_is_not_a_choice(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["generate", "hi", "--dtype", "float16"])
    assert exc.value.code == 2
    assert "--dtype" in capsys.readouterr().err


def test_debug_shows_the_traceback(no_model_load):
    with pytest.raises(PeagleError, match="K "):
        main(["generate", "hi", "-k", "0", "--debug"])


def test_prompt_longer_than_the_context_is_refused(tmp_path, tiny_llama, byte_tokenizer, capsys):
    from peagle_lab.bench import fresh_head

    model = tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=len(byte_tokenizer), max_positions=64)
    model.save_pretrained(tmp_path / "target")
    byte_tokenizer.save_pretrained(tmp_path / "target")
    fresh_head(model, mode="parallel", mask_token_id=3).save_pretrained(tmp_path / "head", dtype=torch.float32)
    rc = main(["generate", "x" * 200, "--target", str(tmp_path / "target"), "--head", str(tmp_path / "head"),
               "--max-new-tokens", "8", "--device", "cpu", "--dtype", "float32"])
    err = capsys.readouterr().err
    assert rc == 2 and "context" in err and "shorten" in err


def test_training_on_data_distilled_from_another_target_is_refused(tmp_path, tiny_llama, byte_tokenizer, capsys):
    import json

    model = tiny_llama(hidden=32, layers=4, vocab=len(byte_tokenizer))
    model.save_pretrained(tmp_path / "target")
    byte_tokenizer.save_pretrained(tmp_path / "target")
    data = tmp_path / "distilled.jsonl"
    meta = {"format": "peagle-lab-distill", "version": 1, "target": "another-model",
            "target_fingerprint": "0123456789abcdef", "max_new_tokens": 8, "system": None, "decoding": "greedy"}
    data.write_text(json.dumps({"meta": meta}) + "\n" + json.dumps(
        {"index": 0, "prompt_sha": "x", "prompt_len": 2, "input_ids": [5, 6, 7, 8], "finished": True}) + "\n")
    rc = main(["train", "--data", str(data), "--out", str(tmp_path / "head"), "--target", str(tmp_path / "target"),
               "--device", "cpu", "--dtype", "float32", "--steps", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "distilled from another target" in err and "another-model" in err
    assert not (tmp_path / "head").exists()  # nothing written
