"""``peagle-lab compare-heads OUT NAME=HEAD_DIR ...``: its arguments are refused with one line before any model
loads, and its table keeps the rows of earlier runs on the same prompts."""

from __future__ import annotations

import json

import pytest

from peagle_lab.errors import PeagleError


@pytest.fixture
def no_target(monkeypatch):
    from peagle_lab import models

    monkeypatch.setattr(models, "load_target", lambda *a, **k: pytest.fail("the target was loaded"))


@pytest.mark.parametrize("pair, said", [("no-equals-sign", "expected NAME=HEAD_DIR"),
                                        ("=data/heads/x", "expected NAME=HEAD_DIR"),
                                        ("name=", "expected NAME=HEAD_DIR")])
def test_a_head_argument_without_name_and_directory_is_one_line(pair, said, tmp_path, capsys, no_target):
    from peagle_lab.cli import main

    assert main(["compare-heads", str(tmp_path / "t.json"), pair]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and repr(pair) in err and "Fix:" in err
    assert not (tmp_path / "t.json").exists()


def test_a_name_given_twice_is_refused(tmp_path, capsys, no_target):
    from peagle_lab.cli import main

    assert main(["compare-heads", str(tmp_path / "t.json"), "a=x", "a=y"]) == 2
    assert "the name 'a' is given twice" in capsys.readouterr().err


def test_a_missing_head_directory_is_refused_before_the_target_loads(tmp_path, capsys, no_target):
    from peagle_lab.cli import main

    assert main(["compare-heads", str(tmp_path / "t.json"), f"gone={tmp_path / 'nowhere'}"]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_names_and_directories_are_split_at_the_first_equals_sign():
    from peagle_lab.cli.experiments import head_pairs

    assert head_pairs(["shipped P-EAGLE=data/heads/a=b", "x=y"]) == [("shipped P-EAGLE", "data/heads/a=b"),
                                                                     ("x", "y")]


def test_the_table_keeps_earlier_rows_on_the_same_prompts_and_replaces_a_row_of_the_same_name(tmp_path):
    from peagle_lab.experiments.compare import start_table

    out = tmp_path / "t.json"
    prompts = [{"id": "p1"}, {"id": "p2"}]
    out.write_text(json.dumps(dict(prompts=["p1", "p2"], rows=[{"head": "old"}, {"head": "again"}])))
    doc = start_table(out, prompts, ["again", "new"])
    assert doc["rows"] == [{"head": "old"}] and doc["prompts"] == ["p1", "p2"]
    assert (doc["max_new_tokens"], doc["dtype"]) == (64, "bfloat16")


@pytest.mark.parametrize("text, said", [('{"prompts": ["other"], "rows": []}', "measured on other prompts"),
                                        ("{not json", "is not a heads comparison table")])
def test_a_table_of_other_prompts_or_a_damaged_one_is_refused(text, said, tmp_path):
    from peagle_lab.experiments.compare import start_table

    out = tmp_path / "t.json"
    out.write_text(text)
    with pytest.raises(PeagleError, match=said):
        start_table(out, [{"id": "p1"}], [])
    assert out.read_text() == text


def test_the_offmix_prompts_are_the_first_of_the_suite_written_apart_from_the_mix():
    from peagle_lab.experiments.compare import OFFMIX_PROMPTS, suite_prompts
    from peagle_lab.prompts import load_scale_records, offmix_records

    off = suite_prompts("offmix")
    assert [r["id"] for r in off] == [r["id"] for r in offmix_records()[:OFFMIX_PROMPTS]]
    assert not {r["prompt"] for r in off} & {r["prompt"] for r in (load_scale_records("train") + load_scale_records("val"))}
    with pytest.raises(PeagleError, match="'heldout' or 'offmix'"):
        suite_prompts("mix")
