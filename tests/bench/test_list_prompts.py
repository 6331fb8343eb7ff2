"""The list prompts: written from seeded templates, two splits that share no prompt, the committed files equal to
the generator's output, and the ``lists`` suite reading the held-out split."""

import json

import pytest

from peagle_lab import list_prompts
from peagle_lab.bench.suites import SUITES, suite_list, suite_prompts, suite_records
from peagle_lab.errors import PeagleError


def test_the_splits_have_their_sizes_and_share_no_prompt():
    records = list_prompts.list_records()
    by_split = {s: [r["prompt"] for r in records if r["split"] == s] for s in list_prompts.SPLIT_SIZES}
    assert {s: len(p) for s, p in by_split.items()} == list_prompts.SPLIT_SIZES
    assert not set(by_split["train"]) & set(by_split["val"])
    assert len(set(by_split["train"])) == len(by_split["train"])  # no prompt twice
    assert records == list_prompts.list_records()  # seeded: the same every time


def test_the_committed_files_are_the_generators_output(tmp_path):
    list_prompts.main(["--out-dir", str(tmp_path)])
    for split in list_prompts.SPLIT_SIZES:
        assert (tmp_path / f"lists-{split}.jsonl").read_text() == list_prompts.lists_file(split).read_text(), (
            f"data/prompts/lists-{split}.jsonl differs from the generator: run python -m peagle_lab.list_prompts")


def test_the_lists_suite_reads_the_held_out_split_and_refuses_past_its_size():
    assert "lists" in SUITES and suite_list("lists") == ["lists"]
    val = [json.loads(line) for line in list_prompts.lists_file("val").read_text().splitlines()]
    assert suite_records("lists", 3) == val[:3]
    with pytest.raises(PeagleError, match="-n 48 or fewer"):
        suite_records("lists", 49)
    with pytest.raises(PeagleError, match="train or val"):
        list_prompts.lists_file("test")


def test_the_lists_suite_tokenizes_through_the_chat_template():
    class Tok:
        chat_template = "user: {text}"

        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
            return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

    ids, names = suite_prompts(Tok(), "lists", 2)
    first = list_prompts.lists_split("val", 1)[0]["prompt"]
    assert names == ["lists-val-000", "lists-val-001"]
    assert "".join(map(chr, ids[0])) == f"<user>{first}<assistant>"


def test_no_list_prompt_shares_a_run_of_words_with_humaneval():
    from peagle_lab.prompts import humaneval_overlap

    assert humaneval_overlap([r["prompt"] for r in list_prompts.list_records()]) == []
