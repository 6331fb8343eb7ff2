"""Bad input never costs work: no silent overwrites, resumes that check their settings, config validation by
schema (with random mutations: load and generate losslessly, or the project's error, never a raw exception),
the usual file permissions, loopback-only servers."""

from __future__ import annotations

import json
import os
import stat

import pytest
import torch
from hypothesis import given, HealthCheck, settings, strategies as st

from peagle_lab import serving
from peagle_lab.drafter import PEagleConfig, PEagleDrafter, validate_config_dict
from peagle_lab.errors import PeagleError

from conftest import make_tiny_llama
from served_heads import make_head, target_dir  # noqa: F401 (fixture)
from training_inputs import quiet, tiny_cfg, tiny_sequences


# ------------------------------------------------------------------------------------------------ export
def test_export_refuses_to_write_over_its_input(tmp_path, target_dir):  # noqa: F811
    head = make_head(tmp_path / "head", target_dir)
    before = sorted(p.name for p in head.iterdir())
    with pytest.raises(PeagleError, match="over its own input"):
        serving.export_vllm(head, head, target=target_dir)
    assert sorted(p.name for p in head.iterdir()) == before
    assert "peagle" in json.loads((head / "config.json").read_text())


def test_export_into_a_non_empty_directory_needs_overwrite_and_leaves_only_the_export(tmp_path, target_dir):  # noqa: F811
    head = make_head(tmp_path / "head", target_dir)
    out = tmp_path / "out"
    out.mkdir()
    (out / "pytorch_model.bin").write_text("stale")
    with pytest.raises(PeagleError, match="--overwrite"):
        serving.export_vllm(head, out, target=target_dir)
    assert (out / "pytorch_model.bin").exists()
    serving.export_vllm(head, out, target=target_dir, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]


def test_sequential_head_exports_without_parallel_drafting(tmp_path, target_dir):  # noqa: F811
    head = make_head(tmp_path / "head", target_dir, mode="sequential")
    out = serving.export_vllm(head, tmp_path / "out", target=target_dir)
    assert "parallel_drafting" not in serving.speculative_config(out)
    cmd = serving.server_command(target_dir, serving.Speculation(out, 3))
    assert "parallel_drafting" not in cmd[cmd.index("--speculative-config") + 1]


@pytest.mark.parametrize("damage", ["truncate", "bad_json", "empty_config"])
def test_export_of_a_damaged_head_is_one_clear_error(tmp_path, target_dir, damage):  # noqa: F811
    head = make_head(tmp_path / "head", target_dir)
    if damage == "truncate":
        w = head / "model.safetensors"
        w.write_bytes(w.read_bytes()[:1000])
    elif damage == "bad_json":
        (head / "config.json").write_text("{not json")
    else:
        (head / "config.json").write_text("{}")
    with pytest.raises(PeagleError, match="damaged|truncated|not a drafter config"):
        serving.export_vllm(head, tmp_path / "out", target=target_dir)


def test_export_files_get_the_usual_permissions(tmp_path, target_dir):  # noqa: F811
    head = make_head(tmp_path / "head", target_dir)
    out = serving.export_vllm(head, tmp_path / "out", target=target_dir)
    mask = os.umask(0)
    os.umask(mask)
    for f in (out / "config.json", out / "model.safetensors", head / "config.json", head / "model.safetensors"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask, f


def test_server_binds_only_loopback_unless_asked_and_then_once(tmp_path, target_dir):  # noqa: F811
    with pytest.raises(PeagleError, match="allow_remote"):
        serving.server_command(target_dir, host="0.0.0.0")
    cmd = serving.server_command(target_dir, host="0.0.0.0", allow_remote=True)
    assert cmd.count("--host") == 1 and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert serving.server_command(target_dir).count("--host") == 1


# ------------------------------------------------------------------------------------------------ training
def test_training_over_a_trained_head_needs_overwrite_or_resume(tmp_path):
    from peagle_lab.training import Trainer

    model = make_tiny_llama(hidden=32, layers=4)
    seqs = tiny_sequences(model, n=3)
    Trainer(tiny_cfg(steps=2), model, seqs, options=quiet(out_dir=tmp_path / "h")).train()
    (tmp_path / "h" / "checkpoint" / "state.pt").unlink()  # a head with no training state left
    weights = (tmp_path / "h" / "model.safetensors").read_bytes()
    with pytest.raises(PeagleError, match="--overwrite"):
        Trainer(tiny_cfg(steps=1), model, seqs, options=quiet(out_dir=tmp_path / "h"))
    assert (tmp_path / "h" / "model.safetensors").read_bytes() == weights
    Trainer(tiny_cfg(steps=1), model, seqs, options=quiet(out_dir=tmp_path / "h", overwrite=True)).train()


@pytest.mark.parametrize("change", [{"num_depths": 3}, {"lr": 0.5}, {"mode": "sequential"}, {"layers": 2}])
def test_resume_with_other_settings_names_each_field(tmp_path, change):
    from peagle_lab.training import Trainer

    model = make_tiny_llama(hidden=32, layers=4)
    seqs = tiny_sequences(model, n=3)
    Trainer(tiny_cfg(steps=4), model, seqs, options=quiet(out_dir=tmp_path / "h")).train(
        stop_after=2)
    with pytest.raises(PeagleError) as exc:
        Trainer(tiny_cfg(steps=4, **change), model, seqs, options=quiet(out_dir=tmp_path / "h", resume=True))
    for field in change:
        assert field in str(exc.value)
    assert "may change on resume" in str(exc.value)
    # what may change: the step budget
    again = Trainer(tiny_cfg(steps=6), model, seqs, options=quiet(out_dir=tmp_path / "h", resume=True))
    assert again.step == 2


def test_a_distilled_record_without_input_ids_is_named(tmp_path):
    from peagle_lab.distill.data import FORMAT, read_distilled

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"meta": {"format": FORMAT}}) + "\n" + json.dumps({"index": 0, "prompt_len": 3}) + "\n")
    with pytest.raises(PeagleError, match="d.jsonl:2 is not a distilled record"):
        read_distilled(path)


def test_distill_rejects_batch_size_zero():
    from peagle_lab.distill.data import DistillSettings, distill

    with pytest.raises(PeagleError, match="batch_size"):
        distill(None, None, ["hi"], "unused.jsonl", DistillSettings(batch_size=0))


def test_a_missing_local_target_path_says_so():
    from peagle_lab.models import resolve_target

    with pytest.raises(PeagleError, match="does not exist"):
        resolve_target("./no/such/model")


# ------------------------------------------------------------------------------------------------ config schema
def _valid_config():
    target = make_tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=96)
    cfg = PEagleConfig.from_target(target.config, aux_layer_ids=(0, 2, 3), mask_token_id=5, num_speculative_tokens=3)
    return target, cfg.to_json_dict()


def test_string_hidden_size_is_named_as_a_type_error():
    _, d = _valid_config()
    d["hidden_size"] = "32"
    with pytest.raises(PeagleError, match="'hidden_size' must be an integer.*str"):
        validate_config_dict(d)


def test_empty_config_is_not_a_drafter_config():
    with pytest.raises(PeagleError, match="not a drafter config"):
        PEagleConfig.from_json_dict({})


def test_draft_vocab_size_disagreeing_with_the_weights_is_named(tmp_path):
    target, d = _valid_config()
    head = PEagleDrafter(PEagleConfig.from_json_dict(d)).init_from_target(target)
    head.save_pretrained(tmp_path / "h", dtype=torch.float32)
    d2 = json.loads((tmp_path / "h" / "config.json").read_text())
    d2["draft_vocab_size"] = 40
    (tmp_path / "h" / "config.json").write_text(json.dumps(d2))
    with pytest.raises(PeagleError, match="does not match its config"):
        PEagleDrafter.from_pretrained(tmp_path / "h", target=target)


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 200), st.floats(allow_nan=True), st.text(max_size=3),
                    st.lists(st.integers(-1, 6), max_size=4), st.dictionaries(st.text(max_size=2), st.integers(),
                                                                                  max_size=2))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                              "intermediate_size", "vocab_size", "num_hidden_layers", "draft_vocab_size",
                              "target_hidden_size", "mask_token_id", "rms_norm_eps", "rope_theta",
                              "eagle_aux_hidden_state_layer_ids", "max_position_embeddings", "peagle"]),
       value=_VALUES, drop=st.booleans())
def test_any_config_mutation_loads_and_generates_losslessly_or_raises_peagle_error(field, value, drop):
    from peagle_lab.decoding.draft_sources import HeadDrafter
    from peagle_lab.decoding.speculative import plain_generate, speculative_generate
    from peagle_lab.decoding.target_runner import TargetRunner

    target, d = _valid_config()
    if drop:
        d.pop(field, None)
    else:
        d[field] = value
    try:
        cfg = PEagleConfig.from_json_dict(d)
        head = PEagleDrafter(cfg).init_from_target(target).eval()
        runner = TargetRunner(target, cfg.aux_hidden_state_layer_ids)
        prompt = [1, 7, 9, 11, 4]
        base = plain_generate(runner, prompt, 6)
        res = speculative_generate(runner, HeadDrafter(head), prompt, 2, 6)
    except PeagleError:
        return
    assert res.tokens == base.tokens


def test_k_above_the_trained_k_is_one_note_of_the_drafter_and_the_loop_runs_without_warning(tiny_llama):
    import warnings

    from peagle_lab.bench import fresh_head
    from peagle_lab.decoding.draft_sources import HeadDrafter
    from peagle_lab.decoding.speculative import speculative_generate
    from peagle_lab.decoding.target_runner import TargetRunner

    model = tiny_llama(hidden=32, layers=4)
    head = fresh_head(model, mode="parallel", mask_token_id=3)
    runner = TargetRunner(model, head.config.aux_hidden_state_layer_ids)
    k = head.config.num_speculative_tokens + 2
    drafter = HeadDrafter(head)
    assert drafter.notes(head.config.num_speculative_tokens) == []
    assert [n for n in drafter.notes(k) if "trained for" in n] == drafter.notes(k) and len(drafter.notes(k)) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the loop itself says nothing: callers show the note where they want
        res = speculative_generate(runner, drafter, [1, 5, 7, 9], k, 24)
    assert res.stats.rounds > 1


def test_a_write_that_cannot_happen_is_one_clear_error_and_keeps_the_old_file(tmp_path):
    from peagle_lab.atomic import write_text

    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where a directory should be")
    with pytest.raises(PeagleError, match="Cannot write|Could not write"):
        write_text(blocker / "out.json", "{}")
    target = tmp_path / "kept.txt"
    write_text(target, "old")

    def broken(tmp):
        raise OSError(28, "No space left on device")

    from peagle_lab.atomic import atomic_write

    with pytest.raises(PeagleError, match="disk may be full"):
        atomic_write(target, broken)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                       st.text(max_size=4)))
def test_argument_validators_accept_or_raise_peagle_error(value):
    from peagle_lab import validate

    for fn, ok in ((validate.num_speculative_tokens, lambda v: 1 <= v <= validate.MAX_K),
                   (validate.max_new_tokens, lambda v: v >= 1), (validate.temperature, lambda v: v >= 0),
                   (validate.top_p, lambda v: 0 < v <= 1), (validate.threads, lambda v: v is None or v >= 1)):
        try:
            got = fn(value)
        except PeagleError:
            continue
        assert ok(got), (fn.__name__, value, got)
