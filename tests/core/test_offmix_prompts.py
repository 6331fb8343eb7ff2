"""Prompts beyond the mix's style: the off-mix suite (written apart from the mix, measured, never trained on) and
the varied training prompts that await distillation; neither repeats nor nearly repeats the training mix, and they
stay apart from each other."""

from __future__ import annotations

import re

import pytest

from peagle_lab import bench, prompts
from peagle_lab.errors import PeagleError
from peagle_lab.prompts import KINDS, kind_of, load_train_records, record_messages, shared_runs


def _texts(records) -> list[str]:
    """Every text a record holds: its prompt and its earlier turns."""
    out = []
    for r in records:
        text, history = record_messages(r)
        out += [text] + [m["content"] for m in history or []]
    return out


def _varied():
    return load_train_records(prompts.data_path("prompts", "varied.jsonl"))


def _mix():
    return load_train_records(prompts.scale_file()) + load_train_records(prompts.train_file())


def test_shared_runs_finds_a_repeat_and_a_near_duplicate_but_not_a_new_text():
    corpus = ["Write Python code that reverses the words of a sentence. Include one example."]
    texts = ["write python code that reverses the words of a sentence include one example",  # case and punctuation
             "Please write Python code that reverses the words of a sentence, quickly.",  # a shared 6-word run
             "rust: flip the word order of a line read from stdin"]
    assert shared_runs(texts, corpus) == [(0, "the same text"), (1, "write python code that reverses the")]


def test_the_offmix_suite_holds_24_or_more_prompts_in_styles_the_mix_lacks():
    recs = prompts.offmix_records()
    assert len(recs) >= 24 and len({r["id"] for r in recs}) == len(recs)
    kinds = [kind_of(r["category"]) for r in recs[:24]]
    assert kinds[:3] == list(("chat", "reasoning", "code")) and {kinds.count(k) for k in KINDS} == {8}
    texts = [r["prompt"] for r in recs]
    assert sum(bool(r.get("history")) for r in recs) >= 3  # multi-turn
    assert sum(len(t.split()) <= 8 for t in texts) >= 3  # terse
    assert sum(len(t.split()) >= 50 for t in texts) >= 2  # long
    assert sum(t[:1].islower() for t in texts) >= 6  # typed as users type: the mix starts every prompt upper-case
    for lang in ("rust", "go", "sql|postgres", "bash", "js|javascript", "c\\+\\+"):
        assert any(re.search(rf"(^|\W)({lang})(\W|$)", t.lower()) for t in texts), lang


def test_no_offmix_prompt_repeats_or_nearly_repeats_the_training_mix_or_the_new_prompts():
    offmix = _texts(prompts.offmix_records())
    assert shared_runs(offmix, _texts(_mix())) == []
    assert shared_runs(offmix, _texts(_varied())) == []


def test_the_varied_prompts_are_new_styles_in_the_mix_format_apart_from_humaneval():
    recs = _varied()
    assert len(recs) >= 280 and len({r["id"] for r in recs}) == len(recs)
    assert len({r["prompt"] for r in recs}) == len(recs)
    assert all({"id", "category", "prompt", "split"} <= set(r) for r in recs)
    assert {kind_of(r["category"]) for r in recs[:10]} == set(KINDS)  # kinds interleaved: any prefix has all
    assert sum(bool(r.get("history")) for r in recs) >= 30
    assert shared_runs(_texts(recs), _texts(_mix())) == []  # new text, not the mix's templates again
    assert prompts.humaneval_overlap(_texts(recs)) == []


def test_the_bench_selects_the_offmix_suite_by_name(byte_tokenizer):
    from peagle_lab.bench.config import BenchConfig

    assert bench.suite_list("offmix") == ["offmix"] and bench.suite_list("all") == ["code", "chat"]
    assert BenchConfig(suite="offmix").suites == ["offmix"]
    ids, names = bench.suite_prompts(byte_tokenizer, "offmix", 4)
    recs = prompts.offmix_records(4)
    assert names == [r["id"] for r in recs]
    multi = next(i for i, r in enumerate(recs) if r.get("history"))
    assert ids[multi] == prompts.chat_ids(byte_tokenizer, recs[multi]["prompt"], history=recs[multi]["history"])
    with pytest.raises(PeagleError, match=r"offmix suite has \d+ prompts; 1000 asked. Fix: -n"):
        prompts.offmix_records(1000)
