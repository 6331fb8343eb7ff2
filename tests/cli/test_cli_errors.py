"""Bad CLI input: one clear error line (exit 2) naming the allowed range, before any model loads."""

from __future__ import annotations

import pytest
import torch

from peagle_lab.cli import main
from peagle_lab.errors import PeagleError


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
def test_generate_rejects_bad_arguments_before_loading(no_long_work, capsys, extra, message):
    rc = main(["generate", "hi", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("peagle-lab: error: "), err
    assert __import__("re").search(message, err[0]), err[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_on_a_cpu_only_machine_is_one_line(no_long_work, capsys):
    assert main(["generate", "hi", "--device", "cuda"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_float16_is_for_cuda_only(no_long_work, capsys):
    rc = main(["generate", "hi", "--dtype", "float16", "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "CUDA only" in err[0] and "--dtype" in err[0], err
    with pytest.raises(SystemExit) as exc:
        main(["generate", "hi", "--dtype", "int8"])
    assert exc.value.code == 2


def test_debug_shows_the_traceback(no_long_work):
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
               "--device", "cpu", "--dtype", "float32", "--steps", "1", "--mask-token-id", "3",
               "--draft-vocab-size", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and "distilled from another target" in err and "another-model" in err
    assert not (tmp_path / "head").exists()  # nothing written


# ---- `peagle-lab train`'s flags are made from TrainConfig's fields ----
def _parser(command: str):
    """The top-level parser with ``command`` registered from its module; ``.sub`` is that command's parser."""
    import argparse
    import importlib

    module = {"train": "peagle_lab.cli.train", "bench": "peagle_lab.cli.bench"}[command]
    ap = argparse.ArgumentParser(prog="peagle-lab")
    sub = ap.add_subparsers()
    importlib.import_module(module).register_cli(sub)
    ap.sub = sub.choices[command]
    return ap


def _train_parser():
    return _parser("train")


def test_every_train_config_field_is_a_train_flag():
    import argparse
    import dataclasses

    from peagle_lab.flags import add_config_flags, flag_field
    from peagle_lab.training import TrainConfig

    dests = {a.dest for a in _train_parser().sub._actions}
    assert {f.name for f in dataclasses.fields(TrainConfig)} <= dests  # `target` comes from --target

    @dataclasses.dataclass
    class Wider(TrainConfig):  # a new field is a new flag, with no second edit
        label_smoothing: float = flag_field(0.0, "a new setting")

    p = argparse.ArgumentParser()
    add_config_flags(p, Wider)
    assert p.parse_args(["--label-smoothing", "0.1"]).label_smoothing == 0.1
    assert "a new setting" in p.format_help()


def test_train_flags_build_the_config_with_the_dataclass_defaults(tmp_path):
    from dataclasses import asdict

    from peagle_lab.training import TrainConfig
    from peagle_lab.cli.train import config_from_args

    base = ["train", "--data", "d.jsonl", "--out", str(tmp_path / "h"), "--target", "t"]
    cfg = config_from_args(_train_parser().parse_args(base))
    assert asdict(cfg) == asdict(TrainConfig(target="t"))
    cfg = config_from_args(_train_parser().parse_args(base + [
        "-K", "4", "--time-budget", "60", "--draft-vocab-size", "0", "--weight-decay", "0.1", "--betas", "0.8", "0.9",
        "--tap-layers", "1", "2", "3", "--freeze-lm-head", "--autocast", "float32", "--grad-clip", "0.5"]))
    assert (cfg.num_depths, cfg.time_budget_s, cfg.schedule, cfg.draft_vocab_size) == (4, 60.0, "time", None)
    assert (cfg.weight_decay, cfg.betas, cfg.tap_layers, cfg.freeze_lm_head, cfg.grad_clip) == (
        0.1, (0.8, 0.9), (1, 2, 3), True, 0.5)


# ---- `peagle-lab bench`'s flags are made from BenchConfig's fields ----
def _bench_parser():
    return _parser("bench")


def test_every_bench_config_field_is_a_bench_flag():
    import argparse
    import dataclasses

    from peagle_lab.bench.config import BenchConfig
    from peagle_lab.flags import add_config_flags, flag_field

    dests = {a.dest for a in _bench_parser().sub._actions}
    fields = dataclasses.fields(BenchConfig)
    assert {f.name for f in fields if f.metadata.get("cli", True)} <= dests
    # no flag of its own: the target options every command shares, and the settings only Python passes
    assert {f.name for f in fields if not f.metadata.get("cli", True)} - dests == {
        "prompts", "eos_id", "hf_greedy", "warmup", "draft_warmup", "new_slots", "verify"}

    @dataclasses.dataclass
    class Wider(BenchConfig):  # a new field is a new flag, with no second edit
        temperature: float = flag_field(0.0, "a new setting")

    p = argparse.ArgumentParser()
    add_config_flags(p, Wider)
    assert p.parse_args(["--temperature", "0.5"]).temperature == 0.5
    assert "a new setting" in p.format_help()


def test_bench_flags_build_the_config_with_the_dataclass_defaults(monkeypatch):
    from dataclasses import asdict

    from peagle_lab.cli.bench import config_from_args
    from peagle_lab.bench.config import FULL, QUICK, BenchConfig

    monkeypatch.delenv("PEAGLE_CI", raising=False)
    parse = _bench_parser().parse_args
    cfg = config_from_args(parse(["bench"]))
    assert asdict(cfg) == asdict(BenchConfig())
    assert (cfg.ks_parallel, cfg.n_prompts, cfg.draft_repeats) == (tuple(FULL["ks_parallel"]), 24, 15)
    cfg = config_from_args(parse(["bench", "--quick", "-n", "3", "--ks-parallel", "1-3,6", "--oracle-ks", "none",
                                  "--skip-drafting", "--no-plots", "--target", "t", "--dtype", "float32"]))
    assert (cfg.quick, cfg.n_prompts, cfg.ks_parallel, cfg.oracle_ks) == (True, 3, (1, 2, 3, 6), ())
    assert (cfg.ks_sequential, cfg.max_new_tokens) == (tuple(QUICK["ks_sequential"]), QUICK["max_new_tokens"])
    assert (cfg.skip_drafting, cfg.no_plots, cfg.target, cfg.dtype) == (True, True, "t", "float32")
    assert config_from_args(parse(["bench", "--ci"])).quick
    monkeypatch.setenv("PEAGLE_CI", "1")  # CI sizes without the flag
    assert asdict(config_from_args(parse(["bench"]))) == asdict(BenchConfig(quick=True))


@pytest.mark.parametrize("settings, message", [
    (dict(repeats=0), r"repeats must be an integer >= 1.*--repeats"),
    (dict(n_prompts=0), r"n_prompts must be an integer >= 1.*-n/--n-prompts"),
    (dict(ks_parallel=[0, 2]), r"ks_parallel must hold integers >= 1.*--ks-parallel"),
    (dict(new_slots=0), r"new_slots must be an integer >= 1.*BenchConfig\(new_slots=...\)"),
    (dict(suite="mtbench"), "Unknown suite 'mtbench'"),
    (dict(oracle_accept="1.7"), "--oracle-accept '1.7'"),
    (dict(skip_drafting=True, skip_e2e=True), "leave nothing to measure"),
    (dict(parallel_head="none"), "needs a parallel head")])
def test_a_bench_config_that_measures_nothing_is_refused_when_made(settings, message):
    from peagle_lab.bench.config import BenchConfig

    with pytest.raises(PeagleError, match=message):
        BenchConfig(**settings)


def test_shipped_training_commands_rebuild_their_recorded_config():
    """The commands users copy from data/heads/*/TRAINING.md still parse into the settings they trained with."""
    import json
    import shlex
    from dataclasses import asdict

    from peagle_lab.settings import REPO_ROOT
    from peagle_lab.cli.train import config_from_args

    records = sorted((REPO_ROOT / "data" / "heads").glob("**/training.json"))
    if not records:
        pytest.skip("no shipped heads here")
    for path in records:
        rec = json.loads(path.read_text())
        cfg = asdict(config_from_args(_train_parser().parse_args(shlex.split(rec["command"])[1:])))
        same = lambda v: list(v) if isinstance(v, (list, tuple)) else v  # noqa: E731
        diff = {k: (v, cfg[k]) for k, v in rec["config"].items() if k in cfg and same(v) != same(cfg[k])}
        assert not diff, (path, diff)


@pytest.mark.parametrize("extra, message", [
    (["--mode", "spiral"], "--mode"), (["--lr", "fast"], "--lr"), (["-K", "2.5"], "-K"),
    (["--betas", "0.9"], "--betas"), (["--autocast", "float16"], "--autocast")])
def test_bad_train_flag_values_name_the_flag(capsys, extra, message):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", "d.jsonl", "--out", "h", *extra])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_inconsistent_train_settings_are_one_line_before_loading(no_long_work, tmp_path, capsys):
    rc = main(["train", "--data", "d.jsonl", "--out", str(tmp_path / "h"), "--schedule", "time"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "time_budget_s" in err[0], err
    assert not (tmp_path / "h").exists()


def test_extract_cuts_where_train_does_and_refuses_a_length_below_two(no_long_work, capsys, tmp_path):
    rc = main(["extract", "--out", str(tmp_path / "f"), "--max-seq-len", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "max_seq_len must be an integer >= 2, got 1" in err[0] and "Fix:" in err[0]
    assert not (tmp_path / "f").exists()
