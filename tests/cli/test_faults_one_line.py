"""Faults and bad arguments end in one line, with nothing lost: a lock deleted under a running writer, a full disk
(lock, state, shard, export, log), a torn last log line, a missing or truncated feature shard, nested JSON, and
every number of serve, tap lists, K lists, seeds, empty environment variables and the chat ``history`` shape,
checked before any work."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from peagle_lab import atomic, jsonl_log, lock
from peagle_lab.errors import PeagleError

from cli_inputs import base, one_error_line, prompts_file, target  # noqa: F401

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                   os.environ.get("PYTHONPATH", "")]))


def disk_full(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device")


# ------------------------------------------------------------------------------------------------ the lock
def test_a_lock_deleted_under_a_writer_stops_it_before_it_overwrites_the_next_writer(tmp_path):
    """Run A holds d.jsonl; a cleanup deletes its lock; run B (another process) takes the output and writes. A's
    next write is refused, naming what happened; B's file and B's lock are left as they are."""
    out = tmp_path / "d.jsonl"
    with lock.hold(out):
        atomic.write_text(out, "A's records\n")
        lock.lock_path(out).unlink()  # `git clean -X`
        code = textwrap.dedent(f"""
            from peagle_lab import atomic, lock
            lock.acquire({str(out)!r})
            atomic.write_text({str(out)!r}, "A's records\\nB's records\\n")
            print("written", flush=True)
            import time; time.sleep(600)
        """)
        b = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV)
        try:
            assert b.stdout.readline().strip() == "written"
            with pytest.raises(PeagleError, match="deleted or replaced while this run held it"):
                atomic.write_text(out, "A's records\nA's later records\n")
            assert out.read_text() == "A's records\nB's records\n"
        except BaseException:
            b.kill()
            raise
    try:
        assert lock.lock_path(out).exists(), "A's release must not remove B's lock"
    finally:
        b.kill()
        b.wait()


def test_disk_full_while_writing_the_lock_is_one_line_and_leaves_no_lock(tmp_path, monkeypatch):
    out = tmp_path / "d.jsonl"
    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(PeagleError, match="disk may be full"):
        with lock.hold(out):
            pass
    monkeypatch.undo()
    assert not lock.lock_path(out).exists()
    with lock.hold(out):  # and the next run takes it normally
        pass


# ------------------------------------------------------------------------------------------------ a full disk
@pytest.mark.parametrize("error", ["OSError", "torch.save", "SafetensorError"])
def test_a_write_failing_for_a_full_disk_is_one_line_and_keeps_the_previous_file(tmp_path, error):
    """What each writer raises on a full disk: OSError (files), RuntimeError (torch.save: the training state),
    SafetensorError (safetensors: shards, heads)."""
    from safetensors import SafetensorError

    raised = {"OSError": OSError(errno.ENOSPC, "No space left on device"),
              "torch.save": RuntimeError("[enforce fail at inline_container.cc] . PytorchStreamWriter failed "
                                         "writing file data/0: file write failed"),
              "SafetensorError": SafetensorError("Error while serializing: IoError(No space left on device)")}
    path = tmp_path / "state.pt"
    torch.save({"step": 1}, path)

    def write(tmp):
        Path(tmp).write_bytes(b"half")
        raise raised[error]

    with pytest.raises(PeagleError, match="disk may be full"):
        atomic.atomic_write(path, write)
    assert torch.load(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]


def test_an_export_failing_for_a_full_disk_is_one_line_and_keeps_the_previous_export(tmp_path, monkeypatch):
    import safetensors.torch

    from peagle_lab.serving import export_vllm
    from conftest import make_tiny_llama
    from served_heads import make_head

    target = tmp_path / "target"
    make_tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=96).save_pretrained(target)
    head = make_head(tmp_path / "head", target)
    out = export_vllm(head, tmp_path / "vllm", target=target)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full(*a, **k):
        from safetensors import SafetensorError
        raise SafetensorError("Error while serializing: IoError(No space left on device)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(PeagleError, match="disk may be full"):
        export_vllm(head, out, target=target, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".vllm")] == []  # no staging, no lock left


# ------------------------------------------------------------------------------------------------ append-only logs
def test_a_torn_last_log_line_is_cut_before_the_next_row_and_said(tmp_path, capsys):
    log = tmp_path / "train_log.jsonl"
    log.write_text(json.dumps({"step": 1}) + "\n" + '{"step": 2, "lo')
    jsonl_log.append_row(log, {"step": 2})
    assert [json.loads(x) for x in log.read_text().splitlines()] == [{"step": 1}, {"step": 2}]
    assert "dropped a last line cut short" in capsys.readouterr().err


def test_a_whole_last_row_without_its_newline_is_kept(tmp_path):
    log = tmp_path / "train_log.jsonl"
    log.write_text(json.dumps({"step": 1}) + "\n" + json.dumps({"step": 2}))
    jsonl_log.append_row(log, {"step": 3})
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [1, 2, 3]


def test_reading_a_log_with_a_torn_last_line_says_what_it_left_out(tmp_path, capsys):
    log = tmp_path / "train_log.jsonl"
    log.write_text(json.dumps({"step": 1}) + "\n" + '{"ste')
    assert jsonl_log.read_rows(log) == [{"step": 1}]
    assert "left out its last line" in capsys.readouterr().err


def test_two_resumes_over_a_torn_log_keep_the_whole_curve(tmp_path):
    from peagle_lab.training import Trainer
    from conftest import make_tiny_llama
    from training_inputs import quiet, tiny_cfg, tiny_sequences

    model = make_tiny_llama(hidden=32, layers=4)
    seqs = tiny_sequences(model, n=3)
    log = tmp_path / "h" / "checkpoint" / "train_log.jsonl"
    Trainer(tiny_cfg(steps=6, save_every=1), model, seqs, options=quiet(out_dir=tmp_path / "h")).train(stop_after=2)
    with open(log, "a") as fh:
        fh.write('{"step": 3, "loss": 1.2')  # a power cut in mid-row
    Trainer(tiny_cfg(steps=6, save_every=1), model, seqs, options=quiet(out_dir=tmp_path / "h", resume=True)).train(
        stop_after=2)
    Trainer(tiny_cfg(steps=6, save_every=1), model, seqs, options=quiet(out_dir=tmp_path / "h", resume=True)).train()
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [1, 2, 3, 4, 5, 6]


# ------------------------------------------------------------------------------------------------ feature shards
@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_missing_or_truncated_shard_is_one_line_naming_it_and_how_to_rebuild(tmp_path, damage):
    from peagle_lab.features.writer import ExtractionSettings, extract_features
    from peagle_lab.features.reader import load_features, shard_ids
    from peagle_lab.training.stream import ShardSequences
    from conftest import make_tiny_llama

    model = make_tiny_llama(hidden=32, layers=4)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 96, (12,), generator=g).tolist() for _ in range(4)]
    out = tmp_path / "feats"
    extract_features(model, seqs, out, ExtractionSettings(shard_size=2), progress=False, verbose=False)
    shard = sorted(out.glob("*.safetensors"))[0]
    if damage == "missing":
        shard.unlink()
    else:
        shard.write_bytes(shard.read_bytes()[:200])
    for read in (lambda: load_features(out), lambda: shard_ids(shard),
                 lambda: ShardSequences([shard], [(0, 0)], [12], [1]).load(0, [0]),
                 lambda: list(ShardSequences([shard], [(0, 0)], [12], [1]).anchor_labels())):
        with pytest.raises(PeagleError) as exc:
            read()
        assert shard.name in str(exc.value) and "peagle-lab extract" in str(exc.value), exc.value


# ------------------------------------------------------------------------------------------------ nested JSON
def test_deeply_nested_json_in_a_prompts_or_distilled_file_is_one_line(tmp_path):
    from peagle_lab.prompts import load_train_records
    from peagle_lab.distill.data import read_distilled

    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "p.jsonl").write_text(deep + "\n")
    with pytest.raises(PeagleError, match="p.jsonl:1 is nested too deeply"):
        load_train_records(tmp_path / "p.jsonl")
    (tmp_path / "d.jsonl").write_text(deep + "\n")
    with pytest.raises(PeagleError, match="d.jsonl:1 is not JSON"):
        read_distilled(tmp_path / "d.jsonl")


# ------------------------------------------------------------------------------------------------ arguments
@pytest.mark.parametrize("extra, message", [
    (["-k", "-1"], "K (num_speculative_tokens) must be an integer 1..64"),
    (["-k", "0"], "K (num_speculative_tokens) must be an integer 1..64"),
    (["-k", "1000"], "K (num_speculative_tokens) must be an integer 1..64"),
    (["--port", "-1"], "port must be an integer 1..65535"),
    (["--port", "99999"], "port must be an integer 1..65535"),
    (["--max-model-len", "-5"], "max_model_len must be an integer 16.."),
])
def test_serve_checks_its_numbers_before_starting(capsys, extra, message):
    assert message in one_error_line(capsys, ["serve", "--head", "h", *extra])


def test_serve_refuses_a_port_that_already_answers(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert "already in use" in one_error_line(capsys, ["serve", "--port", str(port)])


@pytest.mark.parametrize("extra, message", [
    (["-K", "0"], "must be an integer 1..64"), (["--concurrency", "0,4"], "concurrency must be an integer 1..1024"),
    (["--concurrency", "a"], "is not a list of integers"), (["--port", "65535"], "port must be an integer 1..65534"),
    (["--repeats", "0"], "repeats must be an integer >= 1")])
def test_serve_sweep_checks_its_numbers_before_starting(capsys, tmp_path, extra, message):
    assert message in one_error_line(capsys, ["serve-sweep", "--out", str(tmp_path / "s"), *extra])


@pytest.mark.parametrize("cmd, taps", [("extract", ["--taps", "2,2,2"]), ("extract", ["--tap-layers", "3,1"]),
                                       ("extract", ["--tap-layers", "3", "1"]), ("train", ["--tap-layers", "3", "1", "2"]),
                                       ("train", ["--tap-layers", "1", "1"])])
def test_tap_lists_must_be_distinct_and_ascending(no_long_work, capsys, target, tmp_path, cmd, taps):
    line = one_error_line(capsys, base(cmd, target, tmp_path) + taps)
    assert "must be distinct and ascending" in line and "--tap-layers" in line


@pytest.mark.parametrize("ks", ["1-100", "0,2", "65"])
def test_k_lists_are_bounded_and_refused_at_the_flag(capsys, tmp_path, ks):
    from peagle_lab.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", "--out", str(tmp_path / "b"), "--ks-parallel", ks])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--ks-parallel" in err and "integers in 1..64" in err


@pytest.mark.parametrize("cmd", ["generate", "train"])
@pytest.mark.parametrize("seed", [2**32, -1])
def test_seeds_out_of_range_are_refused_before_loading(no_long_work, capsys, target, tmp_path, cmd, seed):
    argv = ["generate", "hi", "--target", str(target)] if cmd == "generate" else base(cmd, target, tmp_path)
    assert "seed must be an integer 0..4294967295" in one_error_line(capsys, argv + ["--seed", str(seed)])


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_cache_or_target_variable_counts_as_unset(monkeypatch, value):
    from peagle_lab.models import DEFAULT_TARGET, cache_dir, target_name

    monkeypatch.delenv("PEAGLE_CACHE", raising=False)
    monkeypatch.delenv("PEAGLE_TARGET", raising=False)
    default_cache = cache_dir()
    monkeypatch.setenv("PEAGLE_CACHE", value)
    monkeypatch.setenv("PEAGLE_TARGET", value)
    assert cache_dir() == default_cache and cache_dir() != Path(value)
    assert target_name() == DEFAULT_TARGET


@pytest.mark.parametrize("history, message", [
    ({"role": "user", "content": "x"}, "history must be a list of turns"), ("earlier", "history must be a list"),
    ([{"role": "robot", "content": "x"}], "history turn 0 must be"), ([["user", "x"]], "history turn 0 must be")])
def test_a_history_of_the_wrong_shape_is_named(tmp_path, history, message):
    from peagle_lab.prompts import chat_messages, load_train_records

    with pytest.raises(PeagleError, match=message):
        chat_messages("hi", history=history)
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt": "hi", "history": history}) + "\n")
    with pytest.raises(PeagleError, match=f"p.jsonl:1 .*{message}"):
        load_train_records(tmp_path / "p.jsonl")


def test_a_full_disk_at_the_first_state_leaves_no_head_that_looks_complete(tmp_path, monkeypatch):
    """torch.save fails (a full disk) at the first save: one error, and --out holds no head without its state."""
    import peagle_lab.training.trainer as trainer_mod
    from peagle_lab.training import Trainer
    from conftest import make_tiny_llama
    from training_inputs import quiet, tiny_cfg, tiny_sequences

    def full(obj, path):
        atomic.atomic_write(path, lambda tmp: (_ for _ in ()).throw(
            RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")))

    monkeypatch.setattr(trainer_mod, "atomic_torch_save", full)
    model = make_tiny_llama(hidden=32, layers=4)
    with pytest.raises(PeagleError, match="disk may be full"):
        Trainer(tiny_cfg(steps=3, save_every=1), model, tiny_sequences(model, n=3),
                options=quiet(out_dir=tmp_path / "h")).train()
    assert not (tmp_path / "h" / "model.safetensors").exists()


def test_distill_overwrite_replaces_a_damaged_out_and_without_it_the_damage_is_named_first(
        no_long_work, capsys, target, tmp_path):
    from cli_inputs import reaches_long_work

    argv = base("distill", target, tmp_path) + ["--prompts-file", str(prompts_file(tmp_path / "p.jsonl", ["hi"]))]
    (tmp_path / "d.jsonl").write_text('{"meta": {"format": "x"}}\n{not json\n')
    assert "d.jsonl:2 is not JSON" in one_error_line(capsys, argv)
    reaches_long_work(capsys, argv + ["--overwrite"])
