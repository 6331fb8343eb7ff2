"""No run loses another's work: one writer per output (a lock with the holder's pid and host; a dead holder's lock
taken over, and said so), distill only ever adds records (dropping any needs --overwrite, which says how many),
and what a killed run left behind is swept by the next run of the same output, never while another run holds it.

Writers that hold a lock from another process are real processes: a small Python child that takes the lock, or
the ``peagle-lab`` command itself."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from peagle_lab import lock
from peagle_lab.distill.data import DistillSettings, distill, read_distilled
from peagle_lab.errors import PeagleError

from conftest import CHATML_TEMPLATE, make_byte_tokenizer, make_tiny_llama

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                   os.environ.get("PYTHONPATH", "")]))


def holder_process(output) -> subprocess.Popen:
    """A child process that takes the lock of ``output`` and keeps it until it is killed."""
    code = textwrap.dedent(f"""
        import sys, time
        from peagle_lab import lock
        lock.acquire({str(output)!r})
        print("held", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout.readline().strip() == "held"
    return proc


def dead_pid() -> int:
    """The pid of a process that has ended (what a killed run's temporary names carry)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def left_by(output, pid: int, rest: str = "k3j4") -> str:
    """The name of a temporary file that process ``pid`` of this host made for ``output``."""
    return lock.temp_prefix(output).rsplit("-", 2)[0] + f"-{pid}-{rest}.tmp"


@pytest.fixture
def tiny():
    tok = make_byte_tokenizer(CHATML_TEMPLATE)
    return make_tiny_llama(hidden=32, layers=2, vocab=len(tok), max_positions=128), tok


# ------------------------------------------------------------------------------------------------ the lock
def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "d.jsonl"
    proc = holder_process(out)
    try:
        with pytest.raises(PeagleError) as exc:
            with lock.hold(out):
                pass
        msg = str(exc.value)
        assert f"pid {proc.pid} on host {socket.gethostname()}, `python -c`, since" in msg
        assert "Fix:" in msg
    finally:
        proc.kill()
        proc.wait()


def test_a_dead_holders_lock_is_taken_over_with_one_line(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    proc = holder_process(out)
    proc.send_signal(signal.SIGKILL)  # killed: its lock file stays, the kernel dropped its flock
    proc.wait()
    assert lock.lock_path(out).exists()
    with lock.hold(out):
        held = json.loads(lock.lock_path(out).read_text())
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"left by a run that ended without releasing it (pid {proc.pid}" in err[0], err
    assert held["pid"] == os.getpid()
    assert not lock.lock_path(out).exists()  # released: removed


def test_a_lock_written_on_another_host_is_not_taken_over(tmp_path):
    out = tmp_path / "d.jsonl"
    lock.lock_path(out).write_text(json.dumps({"pid": 1, "host": "elsewhere", "command": "peagle-lab distill",
                                               "since": "yesterday"}))
    with pytest.raises(PeagleError, match="on another host .* delete"):
        with lock.hold(out):
            pass


def test_holding_is_reentrant_in_one_process_and_released_by_the_outermost(tmp_path):
    out = tmp_path / "h"
    with lock.hold(out):
        with lock.hold(out):
            assert lock.lock_path(out).exists()
        assert lock.lock_path(out).exists()
    assert not lock.lock_path(out).exists()
    assert not out.exists()  # the lock alone never leaves a folder behind


def test_two_trainings_on_one_output_one_is_refused_before_loading(tmp_path, capsys, monkeypatch):
    """The second `train` on the same --out (or --state-dir) stops before loading anything; the first's files
    are untouched."""
    import peagle_lab.models as models
    from peagle_lab.cli import main

    monkeypatch.setattr(models, "load_target", lambda *a, **k: pytest.fail("loaded while another run holds --out"))
    tok = make_byte_tokenizer(CHATML_TEMPLATE)
    make_tiny_llama(hidden=32, layers=4, vocab=len(tok)).save_pretrained(tmp_path / "target")
    tok.save_pretrained(tmp_path / "target")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"meta": {"format": "peagle-lab-distill"}}) + "\n" + json.dumps(
        {"index": 0, "prompt_sha": "a", "prompt_len": 2, "input_ids": [40, 41, 42, 43]}) + "\n")
    argv = ["train", "--data", str(data), "--target", str(tmp_path / "target"), "--device", "cpu", "--split", "all",
            "--mask-token-id", "3", "--draft-vocab-size", "0"]
    capsys.readouterr()
    for held, args in (("head", ["--out", str(tmp_path / "head")]),
                       ("state", ["--out", str(tmp_path / "other"), "--state-dir", str(tmp_path / "state")])):
        proc = holder_process(tmp_path / held)
        try:
            rc = main(argv + args)
            err = capsys.readouterr().err.strip().splitlines()
            assert rc == 2 and len(err) == 1 and f"pid {proc.pid}" in err[0], err
        finally:
            proc.kill()
            proc.wait()


def test_the_trainer_holds_its_folders_while_it_trains(tmp_path):
    from peagle_lab.training import Trainer
    from training_inputs import quiet, tiny_cfg, tiny_sequences

    model = make_tiny_llama(hidden=32, layers=4)
    seqs = tiny_sequences(model, n=3)
    proc = holder_process(tmp_path / "h" / "checkpoint")
    try:
        trainer = Trainer(tiny_cfg(steps=2), model, seqs, options=quiet(out_dir=tmp_path / "h"))
        with pytest.raises(PeagleError, match=f"pid {proc.pid}"):
            trainer.train()
    finally:
        proc.kill()
        proc.wait()
    assert not (tmp_path / "h" / "config.json").exists()


# ------------------------------------------------------------------------------------------------ distill adds
def test_fewer_prompts_over_an_existing_file_keep_every_record(tmp_path, tiny):
    model, tok = tiny
    out = tmp_path / "d.jsonl"
    distill(model, tok, ["one", "two", "three"], out, DistillSettings(max_new_tokens=4), progress=False)
    before = out.read_bytes()
    got = distill(model, tok, ["one"], out, DistillSettings(max_new_tokens=4), progress=False)
    assert len(got) == 1 and len(read_distilled(out)[1]) == 3
    assert out.read_bytes() == before  # nothing new, nothing dropped, nothing rewritten differently


def test_another_prompts_file_adds_its_records_and_drops_none(tmp_path, tiny):
    model, tok = tiny
    out = tmp_path / "d.jsonl"
    first = distill(model, tok, ["one", "two"], out, DistillSettings(max_new_tokens=4), progress=False)
    other = distill(model, tok, ["three", "one"], out, DistillSettings(max_new_tokens=4), progress=False)
    records = read_distilled(out)[1]
    assert len(records) == 3 and len({r["index"] for r in records}) == 3
    assert other[1] == first[0]  # found by prompt, not by position
    assert {json.dumps(r, sort_keys=True) for r in first} <= {json.dumps(r, sort_keys=True) for r in records}


def test_dropping_records_needs_overwrite_and_says_how_many(tmp_path, tiny, capsys):
    model, tok = tiny
    out = tmp_path / "d.jsonl"
    distill(model, tok, ["one", "two"], out, DistillSettings(max_new_tokens=4), progress=False)
    before = out.read_bytes()
    with pytest.raises(PeagleError, match="2 sequences made with other settings.*--overwrite to drop those 2"):
        distill(model, tok, ["one"], out, DistillSettings(max_new_tokens=6), progress=False)
    assert out.read_bytes() == before
    distill(model, tok, ["one"], out, DistillSettings(max_new_tokens=6), progress=False, overwrite=True)
    assert "dropping the 2 records" in capsys.readouterr().err
    assert len(read_distilled(out)[1]) == 1


def test_distill_cli_with_a_smaller_prompt_count_keeps_the_file(tmp_path, capsys):
    """`distill --prompts 1` over a 2-record --out keeps both records."""
    from peagle_lab.cli import main

    tok = make_byte_tokenizer(CHATML_TEMPLATE)
    make_tiny_llama(hidden=32, layers=2, vocab=len(tok), max_positions=128).save_pretrained(tmp_path / "target")
    tok.save_pretrained(tmp_path / "target")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["first", "second"]))
    argv = ["distill", "--prompts-file", str(prompts), "--out", str(tmp_path / "d.jsonl"), "--target",
            str(tmp_path / "target"), "--device", "cpu", "--dtype", "float32", "--engine", "transformers",
            "--max-new-tokens", "4"]
    assert main(argv + ["--prompts", "2"]) == 0
    assert main(argv + ["--prompts", "1"]) == 0
    assert "1 records of other prompts kept" in capsys.readouterr().out
    assert len(read_distilled(tmp_path / "d.jsonl")[1]) == 2


@pytest.mark.slow
def test_two_distill_processes_on_one_output_one_is_refused_and_nothing_is_lost(tmp_path):
    """Two real `peagle-lab distill` processes on one --out: while the first holds it (stopped with SIGSTOP right
    after taking the lock, so the overlap is certain), the second stops with one error line naming it; the first
    then finishes; the second, run again, adds its own prompts and keeps all of the first's records."""
    tok = make_byte_tokenizer(CHATML_TEMPLATE)
    make_tiny_llama(hidden=32, layers=2, vocab=len(tok), max_positions=128).save_pretrained(tmp_path / "target")
    tok.save_pretrained(tmp_path / "target")
    out = tmp_path / "d.jsonl"

    def command(name, prompts):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
        return [sys.executable, "-m", "peagle_lab.cli", "distill", "--prompts-file", str(path), "--out", str(out),
                "--target", str(tmp_path / "target"), "--device", "cpu", "--dtype", "float32",
                "--engine", "transformers", "--max-new-tokens", "6", "--batch-size", "1"]

    first = subprocess.Popen(command("a", [f"question {i}" for i in range(4)]), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=ENV)
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if json.loads(lock.lock_path(out).read_text())["pid"] == first.pid:
                break
        except (OSError, ValueError, KeyError):
            pass
        assert first.poll() is None, first.communicate()
        time.sleep(0.05)
    first.send_signal(signal.SIGSTOP)
    try:
        second = subprocess.run(command("b", ["another", "question 0"]), capture_output=True, text=True, env=ENV)
    finally:
        first.send_signal(signal.SIGCONT)
    err = [line for line in second.stderr.strip().splitlines() if line]
    assert second.returncode == 2 and len(err) == 1, second.stderr
    assert f"is being written by another run (pid {first.pid}" in err[0]
    out_a, err_a = first.communicate(timeout=600)
    assert first.returncode == 0, err_a
    records_a = read_distilled(out)[1]
    assert len(records_a) == 4
    again = subprocess.run(command("b", ["another", "question 0"]), capture_output=True, text=True, env=ENV)
    assert again.returncode == 0, again.stderr
    records = read_distilled(out)[1]
    assert len(records) == 5 and all(r in records for r in records_a)


# ------------------------------------------------------------------------------------------------ leftovers
def test_leftovers_of_a_killed_run_are_swept_by_the_next_run_of_that_output(tmp_path, capsys):
    out = tmp_path / "head"
    out.mkdir()
    (out / "config.json").write_text("{}")
    pid = dead_pid()
    left = [tmp_path / left_by(out, pid), out / left_by("model.safetensors", pid, "abc123"),
            tmp_path / left_by(out, pid, "old")]
    left[0].mkdir()
    (left[0] / "model.safetensors").write_bytes(b"x" * 1000)  # export-vllm's staging folder
    left[1].write_bytes(b"half a file")  # atomic.py's temporary file
    left[2].mkdir()
    other = tmp_path / left_by("other", pid)  # another output's: not ours to remove
    other.write_text("keep")
    with lock.hold(out):
        pass
    assert not any(p.exists() for p in left) and other.exists() and (out / "config.json").exists()
    assert "removed 3 temporary file(s)/folder(s)" in capsys.readouterr().err


def test_a_live_writers_temporary_files_are_never_swept(tmp_path):
    out = tmp_path / "d.jsonl"
    proc = holder_process(out)
    tmp = tmp_path / left_by(out, proc.pid)
    tmp.write_text("being written")
    try:
        with pytest.raises(PeagleError, match="another run"):
            with lock.hold(out):
                pass
        assert tmp.exists()
    finally:
        proc.kill()
        proc.wait()


def test_an_export_killed_mid_write_leaves_nothing_after_the_next_export(tmp_path):
    from served_heads import make_head

    target = tmp_path / "target"
    make_tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=96).save_pretrained(target)
    head = make_head(tmp_path / "head", target)
    staging = tmp_path / left_by("vllm", dead_pid())  # what a killed export leaves (its temporary folder)
    staging.mkdir()
    (staging / "model.safetensors").write_bytes(b"\0" * 4096)
    from peagle_lab.serving import export_vllm

    export_vllm(head, tmp_path / "vllm", target=target)
    assert not staging.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".vllm")) == []


def test_a_training_killed_in_its_first_state_write_resumes_without_duplicate_rows(tmp_path):
    """Killed while writing its first state: the state dir holds a log row of step 1, no state.pt, and the
    temporary file of the state being written. --resume starts at step 0, the log holds each step once, and the
    temporary file is gone."""
    from peagle_lab.training import Trainer
    from training_inputs import quiet, tiny_cfg, tiny_sequences

    model = make_tiny_llama(hidden=32, layers=4)
    seqs = tiny_sequences(model, n=3)
    state = tmp_path / "h" / "checkpoint"
    state.mkdir(parents=True)
    (state / "train_log.jsonl").write_text(json.dumps({"step": 1, "loss": 9.0, "acc": [0.0]}) + "\n")
    (state / left_by("state.pt", dead_pid())).write_bytes(b"PK\x03\x04 half a zip")
    Trainer(tiny_cfg(steps=3, save_every=1), model, seqs, options=quiet(out_dir=tmp_path / "h", resume=True)).train()
    steps = [json.loads(line)["step"] for line in (state / "train_log.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    assert not list(state.glob(".*.tmp"))
    assert torch.load(state / "state.pt", weights_only=False)["step"] == 3


def test_a_resumed_log_drops_the_rows_after_the_saved_state(tmp_path):
    from peagle_lab.training import Trainer
    from training_inputs import quiet, tiny_cfg, tiny_sequences

    model = make_tiny_llama(hidden=32, layers=4)
    seqs = tiny_sequences(model, n=3)
    # state at step 2 (save_every) ... then 3, saved again on stop
    Trainer(tiny_cfg(steps=6, save_every=2), model, seqs, options=quiet(out_dir=tmp_path / "h")).train(stop_after=3)
    log = tmp_path / "h" / "checkpoint" / "train_log.jsonl"
    rows = log.read_text().splitlines()
    log.write_text("\n".join(rows + [json.dumps({**json.loads(rows[-1]), "step": 4})]) + "\n")  # a crash after
    Trainer(tiny_cfg(steps=6, save_every=2), model, seqs, options=quiet(out_dir=tmp_path / "h", resume=True)).train()
    steps = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_a_directory_is_swapped_in_whole_or_the_old_one_stays(tmp_path):
    from peagle_lab.atomic import atomic_directory

    out = tmp_path / "out"
    with atomic_directory(out) as staging:
        (staging / "a.txt").write_text("one")
    assert (out / "a.txt").read_text() == "one"
    assert oct(out.stat().st_mode & 0o777) == oct(0o777 & ~_umask())  # not mkdtemp's 0700
    with pytest.raises(RuntimeError, match="stopped half way"):
        with atomic_directory(out) as staging:
            (staging / "a.txt").write_text("two")
            raise RuntimeError("stopped half way")
    assert (out / "a.txt").read_text() == "one" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with atomic_directory(out) as staging:
        (staging / "b.txt").write_text("three")
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"] and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
