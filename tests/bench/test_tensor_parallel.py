"""Tensor parallelism by hand (:mod:`peagle_lab.bench.tp_shard`) and its benchmark
(:mod:`peagle_lab.bench.tensor_parallel`): a target sharded over two gloo processes gives the whole model's logits,
the results file carries what the course reads, and bad input is one line with the fix."""

from __future__ import annotations

import json

import pytest
from transformers import LlamaConfig

from peagle_lab.bench import tensor_parallel as tp
from peagle_lab.bench.tp_shard import check_tp_size, split_sizes
from peagle_lab.cli import main
from peagle_lab.errors import PeagleError

from conftest import make_random_ids, make_tiny_llama

TINY = dict(hidden=48, layers=4, heads=6, kv_heads=3, intermediate=37)  # 3 KV heads over 2 ranks: 2 and 1


def _tiny_gap(rank, world, seed):
    """Runs in each rank: the tiny target's logits gap, whole against sharded, and this rank's KV rows."""
    model = make_tiny_llama(**TINY, seed=seed)
    ids = make_random_ids(length=12, seed=seed)[0].tolist()
    gap = tp.shard_gap(model, ids, rank, world)
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    return gap, attn.k_proj.out_features, attn.q_proj.out_features, mlp.gate_proj.out_features


@pytest.mark.slow
def test_sharded_logits_equal_the_whole_models_over_two_ranks_with_uneven_kv_groups():
    gap, kv_rows, q_rows, mlp_rows = tp.spawn(_tiny_gap, 2, 0)
    head_dim = TINY["hidden"] // TINY["heads"]
    assert (kv_rows, q_rows, mlp_rows) == (2 * head_dim, 4 * head_dim, 19)  # rank 0: 2 of 3 KV groups, 19 of 37
    assert gap < 1e-5, f"sharded logits differ from the whole model's by {gap}"


def test_kv_groups_and_units_split_as_evenly_as_they_go():
    assert split_sizes(3, 2) == [2, 1] and split_sizes(1536, 2) == [768, 768] and split_sizes(37, 3) == [13, 12, 12]


def _config(kv=3):
    return LlamaConfig(num_attention_heads=9, num_key_value_heads=kv, hidden_size=576)


@pytest.mark.parametrize("size, cores, needle", [(4, 8, "does not split the target's 3 KV heads"),
                                                 (0, 8, "not a positive whole number"),
                                                 (2, 1, "needs 2 cores")])
def test_a_tp_size_that_cannot_run_is_one_line_with_the_fix(size, cores, needle):
    with pytest.raises(PeagleError, match=needle) as err:
        check_tp_size(size, _config(), cores)
    assert "Fix:" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("flags, needle", [(["--tp", "4"], "does not split"), (["--tp", "1"], "nothing to compare"),
                                           (["--K", "0"], "--K 0 is below 1"),
                                           (["--head", "./no-such-head"], "No drafter head")])
def test_the_command_refuses_bad_sizes_before_any_process_starts(flags, needle, capsys, no_long_work, tmp_path):
    assert main(["bench-tensor-parallel", *flags, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "Fix:" in err and len(err.splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_another_hosts_results_are_never_overwritten_and_ours_only_with_overwrite(tmp_path):
    path = tmp_path / tp.RESULTS_FILE
    path.write_text(json.dumps({"env": {"host": "gpu-elsewhere"}}))
    with pytest.raises(PeagleError, match="never overwrite another's"):
        tp.check_results_file(path, overwrite=True)
    path.write_text(json.dumps({"env": {"host": tp.host_slug("cpu")}}))
    with pytest.raises(PeagleError, match="--overwrite"):
        tp.check_results_file(path, overwrite=False)
    tp.check_results_file(path, overwrite=True)


@pytest.mark.slow
@pytest.mark.real_model
def test_the_results_file_holds_both_tp_sizes_with_the_drafters_share(tmp_path, capsys):
    assert main(["bench-tensor-parallel", "--repeats", "2", "--warmup", "0", "--prompt-tokens", "24",
                 "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / tp.RESULTS_FILE).read_text())
    assert res["kind"] == "tensor_parallel" and res["env"]["host"] == tp.host_slug("cpu")
    assert res["env"]["threads_per_rank"] == 1 and res["env"]["loadavg_end"] is not None
    assert res["config"]["target_shape"]["kv_heads_per_rank"] == [2, 1] and res["config"]["k"] == 7
    assert [r["tp"] for r in res["rows"]] == [1, 2]
    for row in res["rows"]:
        for mode in ("parallel", "sequential"):
            draft, verify = row[f"{mode}_draft_ms"], row["verify_ms"]
            assert row[f"{mode}_draft_share"] == pytest.approx(draft / (draft + verify), abs=1e-3)
        assert all(len(res["raw_ms"][str(row["tp"])][c]) == 2 for c in tp.CALLS)
    assert res["logits_max_abs_diff"] < 1e-3
    assert res["all_reduce_ms"] > 0 and res["all_reduces_per_pass"] == 60  # 30 layers, after o_proj and down_proj
    assert main(["bench-tensor-parallel", "--out", str(tmp_path)]) == 2  # no silent overwrite
    assert "--overwrite" in capsys.readouterr().err
