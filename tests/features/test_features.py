"""Feature extraction: the taps are the documented states, extraction is resumable and atomic, the arithmetic
of the disk estimate holds, and bad input fails with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from peagle_lab.features import online as feature_online
from peagle_lab import features as F
from peagle_lab.errors import PeagleError
from peagle_lab.features.taps import default_tap_layers, target_forward

TAPS = (1, 3, 5)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models gain nothing from threads, and on a shared CPU spinning OpenMP threads slow them 10-50x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _prompts(n=10, vocab=96, seed=0):
    """``n`` token-id lists of varied lengths (5..20)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(5, 21, (n,), generator=gen).tolist()
    return [torch.randint(3, vocab, (t,), generator=gen).tolist() for t in lengths]


def _files(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _extract(model, prompts, out, on_shard=None, **settings):
    settings = F.ExtractionSettings(**dict(dict(tap_layers=TAPS, shard_size=3), **settings))
    return F.extract_features(model, prompts, out, settings, progress=False, on_shard=on_shard, verbose=False)


@pytest.fixture
def model(tiny_llama):
    return tiny_llama(hidden=32, layers=6)


@pytest.fixture
def reference(model, tmp_path):
    """An uninterrupted extraction of 10 prompts in 4 shards (3+3+3+1)."""
    out = tmp_path / "reference"
    result = _extract(model, _prompts(), out)
    assert result.manifest["complete"] and result.shards_written == 4
    return out


# -- the taps are the documented states ---------------------------------------------------------------------------

def test_taps_equal_output_hidden_states_at_tap_ids(model, random_ids):
    ids = random_ids(length=11)
    hs = model(ids, output_hidden_states=True).hidden_states
    rec = F.sequence_features(model, ids[0], TAPS, taps_dtype=torch.float32)
    expected = torch.cat([hs[i][0] for i in TAPS], dim=-1)
    assert rec["taps"].shape == (11, 3 * 32)
    assert torch.equal(rec["taps"], expected)


def test_tap_i_is_the_input_of_decoder_layer_i(model, random_ids):
    seen = {}

    def grab(i):
        def hook(module, args, kwargs):
            seen[i] = (args[0] if args else kwargs["hidden_states"]).detach().clone()
        return hook

    handles = [model.model.layers[i].register_forward_pre_hook(grab(i), with_kwargs=True) for i in TAPS]
    try:
        rec = F.sequence_features(model, random_ids(length=9)[0], TAPS, taps_dtype=torch.float32)
    finally:
        for h in handles:
            h.remove()
    chunks = rec["taps"].split(32, dim=-1)
    for chunk, i in zip(chunks, TAPS):
        assert torch.equal(chunk, seen[i][0]), f"tap {i} is not the input of layer {i}"


def test_greedy_next_and_topk_come_from_the_target_logits(model, random_ids):
    ids = random_ids(length=8)
    logits = model(ids).logits[0]
    rec = F.sequence_features(model, ids[0], TAPS, topk=5)
    assert rec["greedy_next"].dtype == torch.int32 and rec["input_ids"].dtype == torch.int32
    assert torch.equal(rec["greedy_next"].long(), logits.argmax(-1))
    values, indices = logits.topk(5, dim=-1)
    assert torch.equal(rec["topk_values"], values) and torch.equal(rec["topk_indices"].long(), indices)


def test_taps_are_stored_in_bfloat16_by_default(model, random_ids):
    ids = random_ids(length=6)[0]
    bf16 = F.sequence_features(model, ids, TAPS)["taps"]
    fp32 = F.sequence_features(model, ids, TAPS, taps_dtype=torch.float32)["taps"]
    assert bf16.dtype == torch.bfloat16
    assert torch.equal(bf16, fp32.to(torch.bfloat16))


# -- offline extraction, readers, online ------------------------------------------------------------------------

def test_readers_return_one_dict_per_sequence_in_order(model, reference):
    prompts = _prompts()
    ds = F.FeatureDataset(reference)
    loaded = F.load_features(reference)
    per_shard = list(F.iter_shards(reference))
    assert len(ds) == len(loaded) == 10 and [len(s) for s in per_shard] == [3, 3, 3, 1]
    assert ds.tap_layers == list(TAPS)
    for i, ids in enumerate(prompts):
        rec = ds[i]
        assert rec["input_ids"].tolist() == ids and rec["input_ids"].dtype == torch.long
        assert rec["taps"].shape == (len(ids), 96) and rec["taps"].dtype == torch.bfloat16
        assert rec["greedy_next"].shape == (len(ids),) and rec["greedy_next"].dtype == torch.long
        assert torch.equal(rec["taps"], loaded[i]["taps"])
    assert F.FeatureDataset(reference, taps_dtype=torch.float32)[0]["taps"].dtype == torch.float32


def test_online_features_equal_stored_features(model, tmp_path):
    prompts = _prompts(4)
    _extract(model, prompts, tmp_path / "f", taps_dtype=torch.float32, topk=3)
    stored = F.load_features(tmp_path / "f")
    for off, on in zip(stored, F.online_features(model, prompts, TAPS, topk=3)):
        assert set(off) == set(on)
        for key in on:
            assert torch.equal(off[key], on[key].to(off[key].dtype)), key


def test_interrupted_extraction_resumes_to_identical_files(model, reference, tmp_path):
    out = tmp_path / "interrupted"

    def stop_after_shard_1(index, path):
        if index == 1:
            raise KeyboardInterrupt("simulated interruption")

    with pytest.raises(KeyboardInterrupt):
        _extract(model, _prompts(), out, on_shard=stop_after_shard_1)
    manifest = json.loads((out / F.MANIFEST).read_text())
    assert not manifest["complete"] and [e["index"] for e in manifest["shards"]] == [0, 1]
    with pytest.raises(PeagleError, match="resume"):
        F.FeatureDataset(out)
    assert len(F.FeatureDataset(out, allow_incomplete=True)) == 6

    result = _extract(model, _prompts(), out)
    assert (result.shards_skipped, result.shards_written) == (2, 2)
    assert _files(out) == _files(reference)  # byte-identical shards and manifest


def test_interruption_inside_a_shard_leaves_no_shard_behind(model, reference, tmp_path, monkeypatch):
    out = tmp_path / "mid-shard"
    calls = {"n": 0}
    real = F.batch_features

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:  # second sequence of shard 1 (one sequence per forward)
            raise RuntimeError("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(feature_online, "batch_features", flaky)  # where the writer's batching finds it
    with pytest.raises(RuntimeError, match="killed"):
        _extract(model, _prompts(), out)
    monkeypatch.setattr(feature_online, "batch_features", real)
    assert sorted(p.name for p in out.iterdir()) == [F.MANIFEST, "shard-00000.safetensors"]
    _extract(model, _prompts(), out)
    assert _files(out) == _files(reference)


def _left_by_a_dead_run(name: str) -> str:
    """The temporary name atomic_write gives ``name`` in a process of this host that has ended."""
    import subprocess
    import sys

    from peagle_lab import lock

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return lock.temp_prefix(name).rsplit("-", 2)[0] + f"-{proc.pid}-k1ll3d.tmp"


def test_partial_and_unlisted_files_are_never_taken_for_complete(model, reference, tmp_path):
    out = tmp_path / "damaged"
    with pytest.raises(KeyboardInterrupt):
        _extract(model, _prompts(), out, on_shard=lambda i, p: (_ for _ in ()).throw(KeyboardInterrupt()))
    # A write killed half-way leaves a temporary file; a kill between os.replace and the manifest update leaves a
    # complete-looking shard the manifest does not list; a damaged listed shard has the wrong size.
    (out / _left_by_a_dead_run("shard-00001.safetensors")).write_bytes(b"half a shard")
    (out / "shard-00002.safetensors").write_bytes(b"not listed in the manifest")
    (out / "shard-00000.safetensors").write_bytes(b"truncated")
    result = _extract(model, _prompts(), out)
    assert (result.shards_skipped, result.shards_written) == (0, 4)
    assert _files(out) == _files(reference)


def test_rerunning_a_complete_extraction_computes_nothing(model, reference):
    before = _files(reference)
    result = _extract(model, _prompts(), reference)
    assert (result.shards_skipped, result.shards_written) == (4, 0)
    assert result.manifest["complete"] and _files(reference) == before


@pytest.mark.parametrize("change", [
    dict(tap_layers=(0, 2, 4)),
    dict(taps_dtype=torch.float32),
    dict(topk=4),
    dict(shard_size=2),
    dict(prompts=_prompts(seed=1)),
])
def test_resume_with_other_settings_is_refused(model, reference, change):
    change = dict(change)
    prompts = change.pop("prompts", _prompts())
    with pytest.raises(PeagleError, match="new directory"):
        _extract(model, prompts, reference, **change)


def test_resume_with_another_target_is_refused(tiny_llama, reference):
    other = tiny_llama(hidden=32, layers=6, seed=1)
    with pytest.raises(PeagleError, match="target_fingerprint"):
        _extract(other, _prompts(), reference)


@pytest.mark.parametrize("prompts, match", [
    ([], "empty"),
    ([[5, 6], []], "Sequence 1 is empty"),
    ([[5, 96]], "outside"),
    ([list(range(3, 90)) * 3], "max_position_embeddings"),
])
def test_bad_prompt_sets_raise_with_the_fix(model, tmp_path, prompts, match):
    with pytest.raises(PeagleError, match=match):
        _extract(model, prompts, tmp_path / "bad")


def test_bad_taps_and_directories_raise_with_the_fix(model, tmp_path):
    with pytest.raises(PeagleError, match="out of range"):
        _extract(model, _prompts(2), tmp_path / "x", tap_layers=(1, 2, 6))
    with pytest.raises(PeagleError, match="not a feature directory"):
        F.FeatureDataset(tmp_path)
    with pytest.raises(PeagleError, match="dtype"):
        _extract(model, _prompts(2), tmp_path / "y", taps_dtype=torch.int8)


# -- disk arithmetic ----------------------------------------------------------------------------------------------

def test_bytes_per_token_arithmetic():
    assert F.bytes_per_token(576) == 3 * 576 * 2 + 4 + 4 == 3464
    assert F.bytes_per_token(576, taps_dtype=torch.float32) == 3 * 576 * 4 + 8
    assert F.bytes_per_token(4096, topk=10) == 3 * 4096 * 2 + 8 + 10 * 8
    assert F.bytes_per_token(2880, n_taps=1) == 2880 * 2 + 8
    assert F.estimate_bytes(1000, 576) == 3_464_000


def test_disk_cost_table_rows():
    rows = F.disk_cost_table()
    assert len(rows) == len(F.COST_MODELS) * len(F.COST_DATASETS)
    row = next(r for r in rows if r["model"] == "Llama-3.1-8B" and r["dataset"].startswith("ShareGPT"))
    assert row["tokens"] == 68_000 * 1_500
    assert row["offline_bf16"] == 68_000 * 1_500 * (3 * 4096 * 2 + 8)
    assert row["offline_fp32"] > row["offline_bf16"] and row["online"] == 0
    # EAGLE's own figure for ShareGPT at H=4096 with ONE stored state was ~740 GB; three taps cost three times that.
    one_state = 68_000 * 1_500 * F.bytes_per_token(4096, n_taps=1)
    assert 700e9 < one_state < 900e9
    text = F.format_cost_table(rows)
    assert "GPT-OSS-20B" in text and "TB" in text
    assert F.format_bytes(1536) == "1.5 KB" and F.format_bytes(12) == "12 B"


def test_estimate_matches_the_real_size(model, reference):
    manifest = F.read_manifest(reference)
    estimate = F.estimate_bytes(manifest["num_tokens"], 32, taps_dtype=torch.bfloat16)
    real = sum(e["bytes"] for e in manifest["shards"])
    assert estimate <= real < estimate + 4 * 1024  # shard headers and offsets: well under 1 KB per shard


def test_default_taps_are_vllms():
    assert default_tap_layers(30) == (2, 15, 27)


def test_cli_extracts_the_first_training_prompts(tmp_path, monkeypatch, tiny_llama, byte_tokenizer):
    from peagle_lab import cli, models

    model = tiny_llama(hidden=32, layers=6, vocab=len(byte_tokenizer), max_positions=1024)
    monkeypatch.setattr(models, "load_target", lambda *a, **k: (model, byte_tokenizer))
    cli.main(["extract", "--out", str(tmp_path / "cli"), "--prompts", "3", "--taps", "1,3,5", "--shard-size", "2"])
    ds = F.FeatureDataset(tmp_path / "cli")
    assert len(ds) == 3 and ds.tap_layers == [1, 3, 5] and ds.manifest["taps_dtype"] == "bfloat16"


def test_extract_flags_default_to_the_settings_defaults_and_reach_the_settings():
    """``extract``'s --batch-tokens, --shard-size and --topk-logits are ExtractionSettings' fields: one default."""
    from peagle_lab.cli import build_parser
    from peagle_lab.cli.extract import settings_of

    parser = build_parser()
    default = settings_of(parser.parse_args(["extract", "--out", "x"]))
    assert default == F.ExtractionSettings() and default.batch_tokens == F.ExtractionSettings().batch_tokens
    given = settings_of(parser.parse_args(["extract", "--out", "x", "--batch-tokens", "512", "--topk", "4",
                                           "--shard-size", "8"]))
    assert (given.batch_tokens, given.topk, given.shard_size) == (512, 4, 8)
    sub = next(a for a in parser._subparsers._group_actions[0].choices["extract"]._actions
               if a.dest == "batch_tokens")
    assert sub.help.endswith(f"(default: {F.ExtractionSettings().batch_tokens})")  # the help states that default


# -- the real embedded target ---------------------------------------------------------------------------------------

def test_real_target_taps_and_greedy_token(smollm2):
    from peagle_lab.prompts import chat_ids

    model, tok = smollm2
    ids = chat_ids(tok, "Write a Python function that adds two numbers.")
    out = target_forward(model, torch.tensor([ids]), default_tap_layers(30), use_cache=False)
    assert out.taps.shape == (1, len(ids), 3 * 576)
    rec = F.sequence_features(model, ids)
    first = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                           max_new_tokens=1, do_sample=False)[0, -1]
    assert int(rec["greedy_next"][-1]) == int(first)
    assert torch.equal(rec["taps"], out.taps[0].to(torch.bfloat16))


def test_a_full_disk_during_a_shard_write_is_named_and_the_rerun_completes(model, reference, tmp_path,
                                                                            monkeypatch):
    import safetensors.torch as st

    out = tmp_path / "full-disk"
    real, calls = st.save_file, {"n": 0}

    def full_disk(tensors, filename, metadata=None):
        calls["n"] += 1
        if calls["n"] == 2:
            Path(filename).write_bytes(b"the first bytes of a shard")  # what a write cut short leaves
            raise OSError(28, "No space left on device")
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(st, "save_file", full_disk)
    with pytest.raises(PeagleError, match="disk may be full.*run the same extraction again"):
        _extract(model, _prompts(), out)
    monkeypatch.setattr(st, "save_file", real)
    assert sorted(p.name for p in out.iterdir()) == [F.MANIFEST, "shard-00000.safetensors"]  # no partial shard
    with pytest.raises(PeagleError, match="resume"):
        F.FeatureDataset(out)
    result = _extract(model, _prompts(), out)
    assert (result.shards_skipped, result.shards_written) == (1, 3)
    assert _files(out) == _files(reference)


def test_leftovers_of_a_killed_atomic_write_are_swept_on_the_rerun(model, reference, tmp_path):
    """A write killed outright (SIGKILL: no ``finally`` runs) leaves atomic_write's hidden temporary file."""
    out = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        _extract(model, _prompts(), out, on_shard=lambda i, p: (_ for _ in ()).throw(KeyboardInterrupt()))
    (out / _left_by_a_dead_run("shard-00001.safetensors")).write_bytes(b"half a shard")
    (out / _left_by_a_dead_run("manifest.json")).write_text("{")
    _extract(model, _prompts(), out)
    assert _files(out) == _files(reference)


_FEATURE_MODULES = ("__init__", "format", "cost", "online", "writer", "reader", "taps", "identity")


def test_each_feature_concept_has_one_small_module_and_each_name_one_definition():
    import ast
    import importlib

    package = Path(F.__file__).parent
    defined: dict[str, str] = {}
    for name in _FEATURE_MODULES:
        source = (package / f"{name}.py").read_text()
        assert len(source.splitlines()) <= 400, f"features/{name}.py has grown past 400 lines: split it by concept"
        module = "peagle_lab.features" + ("" if name == "__init__" else f".{name}")
        for node in importlib.import_module(module) and ast.parse(source).body:
            targets = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                       [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)])
            for target in targets:
                if target != "__all__":
                    assert target not in defined, f"{target} is defined in both {defined[target]} and {name}"
                    defined[target] = name
    # Every name the notebooks, scripts and other modules import from peagle_lab.features is the one object.
    for public in F.__all__:
        owner = defined[public]
        assert getattr(F, public) is getattr(importlib.import_module(f"peagle_lab.features.{owner}"), public), public
    assert not hasattr(F, "_write_json_atomic")  # the manifest is written by atomic.write_json itself


# -- batched extraction -------------------------------------------------------------------------------------------

def test_length_batches_hold_every_sequence_once_within_the_padded_budget():
    lengths = [5, 40, 7, 7, 33, 6, 100, 12, 8]
    batches = F.length_batches(lengths, batch_tokens=48, max_batch=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 48  # only a lone sequence may exceed it
    assert [100] in [[lengths[i] for i in b] for b in batches]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batched_features_equal_one_at_a_time_within_the_dtypes_rounding(tiny_llama, dtype):
    model = tiny_llama(hidden=32, layers=6).to(dtype)
    prompts = _prompts(8)
    one = [F.sequence_features(model, p, TAPS, torch.float32, topk=4) for p in prompts]
    many = F.batch_features(model, prompts, TAPS, torch.float32, topk=4)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    same_labels = total = 0
    for a, b in zip(one, many):
        assert torch.equal(a["input_ids"], b["input_ids"]) and a["taps"].shape == b["taps"].shape
        torch.testing.assert_close(b["taps"], a["taps"], **tol)
        torch.testing.assert_close(b["topk_values"], a["topk_values"], **tol)
        same_labels += int((a["greedy_next"] == b["greedy_next"]).sum())
        total += len(a["greedy_next"])
    if dtype == torch.float32:
        assert same_labels == total
    else:  # bf16: a label may flip only at a near-tie of the top two logits
        assert same_labels >= 0.95 * total


def test_batched_extraction_writes_the_same_sequences_in_the_same_order(model, reference, tmp_path):
    out = tmp_path / "batched"
    res = _extract(model, _prompts(), out, batch_tokens=40)
    assert res.manifest["batch_tokens"] == 40 and res.manifest["complete"]
    for a, b in zip(F.load_features(reference), F.load_features(out)):
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["greedy_next"], b["greedy_next"])
        torch.testing.assert_close(b["taps"].float(), a["taps"].float(), rtol=1e-2, atol=1e-2)  # bf16 on disk
