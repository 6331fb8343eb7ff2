"""Every input is checked before the long part: a bad argument, environment value, path, prompt, distilled row,
training state or head ends in ONE line ``peagle-lab: error: <what>. Fix: <what to do>`` (exit 2) before the
target's weights load; a good one reaches the long part. "Before the long part" is observed: the model loader
(``models.load_target``, export's writer) is replaced by one that raises ``ReachedLongWork`` (conftest's
``no_long_work``, the one bad-input fixture).

The target is a tiny random Llama saved with a byte-level tokenizer (vocabulary 259, context 64 positions)."""

from __future__ import annotations

import json
import math
import os
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from peagle_lab.cli import main
from peagle_lab.distill.data import prompt_sha

from conftest import CHATML_TEMPLATE, ReachedLongWork, make_byte_tokenizer, make_tiny_llama
from cli_inputs import (  # noqa: F401 (target: a fixture)
    CONTEXT, base, distilled, good_record, one_error_line, prompts_file, reaches_long_work, target,
)


# ------------------------------------------------------------------------------- damaged inputs, named first
DAMAGED_ROWS = {
    "ids as strings": dict(input_ids=["40", "41", "42"]),
    "negative id": dict(input_ids=[40, -1, 42]),
    "id >= vocabulary": dict(input_ids=[40, 259, 42]),
    "float id": dict(input_ids=[40, 41.0, 42]),
    "bool id": dict(input_ids=[40, True, 42]),
    "empty ids": dict(input_ids=[]),
    "prompt_len 0": dict(prompt_len=0),
    "prompt_len past the ids": dict(prompt_len=99),
    "prompt_len a string": dict(prompt_len="3"),
    "no prompt_sha": dict(prompt_sha=None),
    "negative index": dict(index=-2),
}


@pytest.mark.parametrize("cmd", ["train", "extract"])
@pytest.mark.parametrize("damage", sorted(DAMAGED_ROWS))
def test_a_damaged_distilled_row_is_one_error_naming_its_line(no_long_work, capsys, target, tmp_path, cmd, damage):
    argv = base(cmd, target, tmp_path)
    data = argv[argv.index("--data" if cmd == "train" else "--distilled") + 1]
    distilled(tmp_path / "data.jsonl", [good_record(0), {**good_record(1), **DAMAGED_ROWS[damage]}])
    line = one_error_line(capsys, argv)
    assert f"{os.path.basename(data)}:3 is not a distilled record" in line


@pytest.mark.parametrize("extra, message", [
    (["--lr", "-1"], r"lr must be a finite number > 0"),
    (["--lr", "nan"], r"lr must be a finite number > 0"),
    (["--lr", "inf"], r"lr must be a finite number > 0"),
    (["--lr", "0"], r"lr must be a finite number > 0"),
    (["--betas", "2", "2"], r"betas\[0\] must be a finite number >= 0 and < 1"),
    (["--betas", "0.9", "-0.1"], r"betas\[1\]"),
    (["--time-budget", "-5"], r"time_budget_s must be a finite number > 0"),
    (["--time-budget", "0"], r"time_budget_s|time_budget"),
    (["--draft-vocab-size", "1"], r"draft vocabulary size must be an integer in \[2, 259\]"),
    (["--draft-vocab-size", "999999"], r"draft vocabulary size must be an integer in \[2, 259\]"),
    (["--mask-token-id", "999999"], r"mask_token_id must be an integer 0\.\.258"),
    (["-K", "0"], r"num_depths must be an integer >= 1"),
    (["--layers", "0"], r"layers must be an integer >= 1"),
    (["--grad-clip", "0"], r"grad_clip"),
    (["--cod-ratio", "1.5"], r"cod_ratio"),
    (["--num-sequences", "0"], r"num_sequences"),
    (["--eval-ks", "1,x"], r"--eval-ks"),
    (["--tap-layers", "0", "1", "99"], r"Tap layer ids \[99\]"),
    (["--split", "val"], r"no records of the split 'val'"),
])
def test_bad_training_settings_are_refused_before_the_target_loads(no_long_work, capsys, target, tmp_path, extra,
                                                                   message):
    line = one_error_line(capsys, base("train", target, tmp_path) + extra)
    assert re.search(message, line), line


def test_good_training_settings_reach_the_long_part(no_long_work, capsys, target, tmp_path):
    reaches_long_work(capsys, base("train", target, tmp_path) + ["--lr", "1e-3", "--betas", "0.8", "0.99"])


def test_a_truncated_training_state_on_resume_is_one_error(no_long_work, capsys, target, tmp_path):
    state = tmp_path / "head" / "checkpoint"
    state.mkdir(parents=True)
    torch.save({"step": 3, "config": {}}, state / "state.pt")
    (state / "state.pt").write_bytes((state / "state.pt").read_bytes()[:40])
    line = one_error_line(capsys, base("train", target, tmp_path) + ["--resume"])
    assert "truncated or damaged" in line


@pytest.mark.parametrize("prompts, extra, message", [
    (["hi", "there"], ["--prompts", "0"], r"prompts must be an integer >= 1"),
    ([], [], r"holds no prompts"),
    ([""], [], r"Prompt 0 is empty"),
    (["fine", "  \n\t "], [], r"Prompt 1 is empty"),
    (["\udc80abc"], [], r"Prompt 0 is not valid UTF-8"),
    (["x" * 100], [], r"Prompt 0: The prompt has \d+ tokens; the target's context holds 64"),
    (["hi"], ["--max-new-tokens", "100000"], r"--max-new-tokens 100000 does not fit the target's context of 64"),
    (["hi"], ["--max-new-tokens", "60"], r"Prompt 0: The prompt \(\d+ tokens\) plus --max-new-tokens 60"),
    (["hi"], ["--batch-size", "0"], r"batch_size must be an integer >= 1"),
    (["hi"], ["--system", "   "], r"system message"),
    (["hi", "hi"], [], r"prompt 1 repeats prompt 0"),
])
def test_bad_prompts_are_refused_before_the_target_loads(no_long_work, capsys, target, tmp_path, prompts, extra,
                                                         message):
    pf = prompts_file(tmp_path / "p.jsonl", prompts)
    line = one_error_line(capsys, base("distill", target, tmp_path) + ["--prompts-file", str(pf), *extra])
    assert re.search(message, line), line


def test_a_prompts_file_that_is_not_utf8_is_one_error(no_long_work, capsys, target, tmp_path):
    pf = tmp_path / "p.jsonl"
    pf.write_bytes(b'{"prompt": "caf\xe9"}\n')
    line = one_error_line(capsys, base("distill", target, tmp_path) + ["--prompts-file", str(pf)])
    assert "is not UTF-8 text" in line


def test_a_zero_byte_prompts_file_is_refused(no_long_work, capsys, target, tmp_path):
    pf = tmp_path / "p.jsonl"
    pf.write_bytes(b"")
    assert "holds no prompts" in one_error_line(capsys, base("distill", target, tmp_path) + ["--prompts-file", str(pf)])


def test_good_prompts_reach_the_long_part(no_long_work, capsys, target, tmp_path):
    pf = prompts_file(tmp_path / "p.jsonl", ["hi", "a longer question"])
    reaches_long_work(capsys, base("distill", target, tmp_path) + ["--prompts-file", str(pf)])


@pytest.mark.parametrize("env, message", [
    ({"PEAGLE_DEVICE": "mps"}, r"PEAGLE_DEVICE=mps: this machine .* has no mps device"),
    ({"PEAGLE_DEVICE": "gpu0"}, r"Unknown device in PEAGLE_DEVICE=gpu0"),
    ({"PEAGLE_DTYPE": "float16"}, r"float16 is supported for inference on CUDA only, not cpu"),
    ({"PEAGLE_DTYPE": "fp8"}, r"Unknown dtype 'fp8'"),
    ({"PEAGLE_CI": "maybe"}, r"PEAGLE_CI='maybe' is neither on nor off"),
])
@pytest.mark.parametrize("cmd", ["distill", "train", "extract", "generate"])
def test_bad_environment_values_are_one_error_before_loading(no_long_work, capsys, monkeypatch, target, tmp_path,
                                                             env, message, cmd):
    if cmd == "generate":
        argv = ["generate", "hi", "--target", str(target)]
    else:
        argv = [a for a in base(cmd, target, tmp_path) if a not in ("--device", "cpu", "--dtype", "float32")]
        if cmd == "distill":
            argv += ["--prompts-file", str(prompts_file(tmp_path / "p.jsonl", ["hi"]))]
    if "PEAGLE_DEVICE" in env and env["PEAGLE_DEVICE"] == "mps" and torch.backends.mps.is_available():
        pytest.skip("this machine has an mps device")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert re.search(message, one_error_line(capsys, argv))


@pytest.mark.parametrize("extra, message", [(["-n", "0"], r"n_prompts must be an integer >= 1"),
                                            (["--repeats", "0"], r"repeats must be an integer >= 1"),
                                            (["-n", "100000"], r"only 164 are available")])
def test_bench_settings_that_measure_nothing_are_refused_first(no_long_work, capsys, tmp_path, extra, message):
    argv = ["bench", "--out", str(tmp_path / "bench"), "--parallel-head", "fresh", "--sequential-head", "none",
            "--device", "cpu", "--dtype", "float32", *extra]
    assert re.search(message, one_error_line(capsys, argv))


@pytest.mark.parametrize("prompt, message", [("\udcff", "not valid UTF-8"), ("", "The prompt is empty"),
                                             ("  ", "The prompt is empty"),
                                             ("x" * 100, "the target's context holds 64")])
def test_generate_refuses_a_prompt_that_is_no_text(no_long_work, capsys, target, prompt, message):
    assert message in one_error_line(capsys, ["generate", prompt, "--target", str(target), "--max-new-tokens", "8"])


def test_a_head_whose_config_names_another_mode_than_its_weights_is_refused(no_long_work, capsys, target, tmp_path):
    """config.json says P-EAGLE, the weights are an EAGLE-3 head's: refused before the target loads (generate,
    bench, export-vllm, train --init-from), instead of drafting in parallel with weights never trained for it."""
    from peagle_lab.bench import fresh_head

    model = make_tiny_llama(hidden=32, layers=4, vocab=259, max_positions=CONTEXT)
    fresh_head(model, mode="sequential", mask_token_id=3).save_pretrained(tmp_path / "bad-head", dtype=torch.float32)
    cfg = json.loads((tmp_path / "bad-head" / "config.json").read_text())
    cfg["peagle"]["mode"] = "parallel"
    (tmp_path / "bad-head" / "config.json").write_text(json.dumps(cfg))
    for argv in (["generate", "hi", "--target", str(target), "--head", str(tmp_path / "bad-head")],
                 ["bench", "--parallel-head", str(tmp_path / "bad-head"), "--sequential-head", "none", "--out",
                  str(tmp_path / "b"), "--device", "cpu"],
                 base("train", target, tmp_path) + ["--init-from", str(tmp_path / "bad-head")]):
        line = one_error_line(capsys, argv)
        assert "config.json says peagle.mode = 'parallel' but its weights were trained with 'sequential'" in line


def test_export_of_a_head_whose_config_lies_about_its_mode_is_refused(tmp_path):
    from peagle_lab.bench import fresh_head
    from peagle_lab.errors import PeagleError
    from peagle_lab.serving import export_vllm

    model = make_tiny_llama(hidden=32, layers=4, vocab=259, max_positions=CONTEXT)
    fresh_head(model, mode="sequential", mask_token_id=3).save_pretrained(tmp_path / "head", dtype=torch.float32)
    cfg = json.loads((tmp_path / "head" / "config.json").read_text())
    cfg["peagle"]["mode"] = "parallel"
    (tmp_path / "head" / "config.json").write_text(json.dumps(cfg))
    model.save_pretrained(tmp_path / "target")
    with pytest.raises(PeagleError, match="weights were trained with 'sequential'"):
        export_vllm(tmp_path / "head", tmp_path / "vllm", target=tmp_path / "target")
    assert not (tmp_path / "vllm").exists()
    with pytest.raises(PeagleError, match="no readable config.json.*Fix:"):
        export_vllm(tmp_path / "head", tmp_path / "vllm", target=tmp_path)


def test_errors_named_in_the_issue_carry_their_fix():
    from peagle_lab.errors import PeagleError
    from peagle_lab.prompts import load_train_prompts
    from peagle_lab.training import TrainConfig
    from peagle_lab.drafter.vocab import build_draft_vocab

    for call in (lambda: TrainConfig(num_depths=0), lambda: TrainConfig(steps=0), lambda: TrainConfig(layers=0),
                 lambda: load_train_prompts(-1), lambda: build_draft_vocab([1, 2], 0, 10),
                 lambda: build_draft_vocab([1, 2], 1, 10, always=[3, 4])):
        with pytest.raises(PeagleError, match="Fix: "):
            call()


# ---------------------------------------------------------------------------------------- properties
def _valid_row(row, vocab) -> bool:
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    ids = row.get("input_ids")
    return (is_int(row.get("index")) and row["index"] >= 0 and isinstance(row.get("prompt_sha"), str)
            and isinstance(ids, list) and len(ids) > 0 and all(is_int(t) and 0 <= t < vocab for t in ids)
            and is_int(row.get("prompt_len")) and 1 <= row["prompt_len"] <= len(ids))


ANY_ID = st.one_of(st.integers(-3, 300), st.text(max_size=3), st.floats(allow_nan=True), st.booleans(), st.none())
ROWS = st.fixed_dictionaries({
    "index": st.one_of(st.integers(-1, 3), st.just("0"), st.none()),
    "prompt_sha": st.one_of(st.just("00ff"), st.none(), st.integers()),
    "prompt_len": st.one_of(st.integers(-1, 12), st.just("3"), st.floats(0, 5)),
    "input_ids": st.one_of(st.lists(st.integers(0, 258), max_size=10), st.lists(ANY_ID, max_size=6),
                           st.just("1 2 3"), st.none()),
    "finished": st.booleans(),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(ROWS, min_size=1, max_size=3))
def test_property_damaged_distilled_rows_never_reach_the_long_part(no_long_work, capsys, target, tmp_path, rows):
    """Any rows: training either reaches the long part with rows that are all valid (ids ints in the vocabulary,
    prompt_len within them, distinct indices), or stops with one error line before it."""
    argv = base("train", target, tmp_path)
    distilled(tmp_path / "data.jsonl", rows)
    valid = all(_valid_row(r, 259) for r in rows) and len({r["index"] for r in rows}) == len(rows)
    try:
        rc = main(argv)
    except ReachedLongWork:
        assert valid, rows
        capsys.readouterr()
        return
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("peagle-lab: error: ") and "Fix:" in err[0], err
    assert not valid, (rows, err)


NUMBER = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-5, 5)).map(repr)
# --betas takes two values, so each must read as a number, not an option, to argparse: fixed-point or nan / inf
BETA = st.one_of(st.floats(-3, 3).map(lambda x: f"{x:.4f}"), st.sampled_from(["nan", "inf", "1", "0"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lr=NUMBER, b1=BETA, b2=BETA, budget=st.one_of(st.none(), NUMBER), k=st.integers(-2, 9),
       dvs=st.one_of(st.none(), st.integers(-1, 300)), mask=st.one_of(st.none(), st.integers(-1, 300)),
       steps=st.integers(-1, 3))
def test_property_training_arguments_either_reach_the_long_part_valid_or_stop_first(
        no_long_work, capsys, target, tmp_path, lr, b1, b2, budget, k, dvs, mask, steps):
    argv = ["train", "--data", str(distilled(tmp_path / "data.jsonl", [good_record(0)])), "--out",
            str(tmp_path / "h"), "--target", str(target), "--device", "cpu", "--split", "all",
            f"--lr={lr}", "--betas", b1, b2, "-K", str(k), "--steps", str(steps)]
    argv += [f"--time-budget={budget}"] if budget is not None else []
    argv += ["--draft-vocab-size", str(dvs)] if dvs is not None else []
    m = mask if mask is not None else 3
    argv += ["--mask-token-id", str(m)]
    lr_, b1_, b2_ = float(lr), float(b1), float(b2)
    budget_ok = budget is None or (math.isfinite(float(budget)) and float(budget) > 0)
    valid = (all(math.isfinite(v) for v in (lr_, b1_, b2_)) and 0 < lr_ <= 1 and 0 <= b1_ < 1 and 0 <= b2_ < 1
             and k >= 1 and steps >= 1 and budget_ok and 0 <= m < 259
             and dvs is not None and (dvs == 0 or 2 <= dvs <= 259))  # the default 16384 exceeds this vocabulary
    try:
        rc = main(argv)
    except ReachedLongWork:
        assert valid, argv
        capsys.readouterr()
        return
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("peagle-lab: error: ") and "Fix:" in err[0], err
    assert not valid, (argv, err)


PROMPT_TEXT = st.one_of(st.text(max_size=40), st.just(""), st.just("   "), st.just("\udc80"), st.just("y" * 80))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompts=st.lists(PROMPT_TEXT, min_size=0, max_size=3), n=st.one_of(st.none(), st.integers(-1, 4)),
       new=st.integers(-1, 80), batch=st.integers(-1, 3))
def test_property_distill_arguments_either_reach_the_long_part_valid_or_stop_first(
        no_long_work, capsys, target, tmp_path, prompts, n, new, batch):
    from peagle_lab.prompts import chat_ids

    pf = prompts_file(tmp_path / "p.jsonl", prompts)
    argv = base("distill", target, tmp_path) + ["--prompts-file", str(pf), "--max-new-tokens", str(new),
                                                "--batch-size", str(batch)]
    argv += ["--prompts", str(n)] if n is not None else []
    used = prompts[:n] if n is not None and n >= 1 else prompts
    tok = make_byte_tokenizer(CHATML_TEMPLATE)

    def fits(p):
        try:
            p.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return bool(p.strip()) and len(chat_ids(tok, p)) + new <= CONTEXT and len(chat_ids(tok, p)) < CONTEXT

    valid = (batch >= 1 and new >= 1 and (n is None or n >= 1) and len(used) > 0 and all(fits(p) for p in used)
             and len({prompt_sha(p) for p in used}) == len(used))
    try:
        rc = main(argv)
    except ReachedLongWork:
        assert valid, argv
        capsys.readouterr()
        return
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("peagle-lab: error: ") and "Fix:" in err[0], err
    assert not valid, (prompts, argv, err)
