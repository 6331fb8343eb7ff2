"""peagle_lab.workbook.serving_report: 06's section 7 in print, on small synthetic runs."""

from __future__ import annotations

import json

import pytest

from peagle_lab.workbook import serving_report as sr


def _sweep(host="h", engine=None, device="cpu"):
    speedups = [
        {"concurrency": 1, "plain_tokens_per_s": 10.0, "peagle_tokens_per_s": 12.5, "throughput_speedup": 1.25,
         "latency_speedup": 1.2, "acceptance_length": 2.0},
        {"concurrency": 8, "plain_tokens_per_s": 80.0, "peagle_tokens_per_s": 40.0, "throughput_speedup": 0.5,
         "latency_speedup": 0.5, "acceptance_length": 2.0}]
    rows = [{"config": cfg, "repeat": rep, "concurrency": c, "tokens_per_s": tps, "ok": 4}
            for cfg, rep, c, tps in (("plain", 0, 1, 10.0), ("peagle", 0, 1, 12.0), ("plain", 1, 1, 10.0),
                                     ("peagle", 1, 1, 13.0), ("plain", 0, 8, 80.0), ("peagle", 0, 8, 40.0))]
    meta = {"host": host, "head": "hd", "k": 3, "max_tokens": 16, "repeats": 2,
            "environment": {"device": device, "loadavg_start": [0.5]}}
    if engine:
        meta["engine"] = engine
    return {"meta": meta, "speedups": speedups, "rows": rows}


def test_sweep_dtype_prefers_the_recorded_engine_then_the_device():
    assert sr.sweep_dtype({"engine": {"dtype": "bfloat16"}, "environment": {"device": "cuda"}}) == "bfloat16"
    assert sr.sweep_dtype({"environment": {"device": "cuda"}}) == "vLLM's GPU default"
    assert sr.sweep_dtype({"environment": {"device": "cpu"}}) == "float32"


@pytest.mark.parametrize("lo, hi, verdict", [(1.1, 1.3, "pays"), (0.4, 0.9, "costs"),
                                             (0.9, 1.1, "breaks even (1 lies within the repeats)")])
def test_repeat_verdict_needs_every_repeat_on_one_side_of_1(lo, hi, verdict):
    assert sr.repeat_verdict(lo, hi) == verdict


def test_dtype_label_says_when_the_dtype_is_inferred():
    assert sr.dtype_label({"engine": {"dtype": "bfloat16"}, "environment": {"device": "cpu"}}) == "bfloat16"
    assert sr.dtype_label({"environment": {"device": "cpu"}}) == (
        "float32 (not in the file: serve-sweep's setting for this device)")


def test_print_single_request_sets_vllm_against_our_loop(tmp_path, capsys):
    doc = _sweep()
    sr.print_single_request(doc, tmp_path)
    assert capsys.readouterr().out == ""  # no committed bench: nothing to compare
    (tmp_path / "h" / "float32").mkdir(parents=True)
    (tmp_path / "h" / "float32" / "end_to_end.json").write_text(json.dumps({"methods": [
        {"method": "p-eagle K=3", "k": 3, "t_draft_round_ms": 50.0, "t_verify_round_ms": 150.0, "t_step_ms": 100.0}]}))
    sr.print_single_request(doc, tmp_path)
    first, second = capsys.readouterr().out.splitlines()
    # vLLM: 100 ms per plain token, 2 tokens per round at 12.5 tok/s = 160 ms = 1.60 steps
    assert first == ("  1 concurrent, h, float32: vLLM 100 ms per plain token, 160 ms per round (HTTP and prefill "
                     "included) = 1.60 plain steps")
    assert "round 200 ms = 2.00 steps; vLLM's round is longer than our loop's plain step" in second


def test_print_gpu_costs_gives_the_drafts_share_of_a_round(capsys):
    sr.print_gpu_costs({"target_params": 8e9, "dtype": "bfloat16", "decode_step_ms": 10.0,
                        "rows": [{"k": 4, "verify_ratio": 1.2, "parallel_ms": 3.0, "sequential_ms": 12.0,
                                  "verify_ms": 12.0}]})
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "GPU (eager, random weights), batch 1, 8.0B-parameter shapes, bfloat16: one decode step 10.0 ms"
    assert out[-1].split()[-2:] == ["20%", "50%"]  # 3 / (3 + 12) and 12 / (12 + 12)


def test_print_tp_sizes_keeps_the_sizes_that_fit_the_cores(capsys):
    sr.print_tp_sizes(12, [2, 3, 4, 6, 12], 4)
    assert capsys.readouterr().out.endswith("sizes vLLM accepts [2, 3, 4, 6, 12]; one rank per core on these 4 "
                                            "cores: [2, 3, 4]\n")
    sr.print_tp_sizes(9, [3, 9], None)
    assert capsys.readouterr().out.endswith("on these None cores: none fits\n")


def test_print_tensor_parallel_reads_the_first_and_last_size(capsys):
    row = {"tp": 1, "decode_ms": 50.0, "verify_ms": 100.0, "parallel_draft_ms": 5.0, "sequential_draft_ms": 20.0,
           "parallel_draft_share": 0.05, "sequential_draft_share": 0.2}
    tp = {"env": {"host": "h", "dtype": "float32", "loadavg_start": [1.0], "loadavg_end": [2.0], "cpu_count": 4},
          "config": {"k": 7, "repeats": 5}, "all_reduce_ms": 0.5, "all_reduces_per_pass": 10,
          "rows": [row, dict(row, tp=4, decode_ms=30.0, verify_ms=40.0, sequential_draft_share=0.4,
                             parallel_draft_share=0.1)]}
    sr.print_tensor_parallel(tp)
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith("sharding over 4 processes makes verification 2.50x as fast (faster); the drafter's "
                              "share of a round grows (EAGLE-3 20.0% -> 40.0%")
    assert out[-1].startswith("the all-reduces of one pass: 10 x 0.500 = 5.0 ms, against a decode step that rose by "
                              "-20.0 ms; EAGLE-3's draft share over P-EAGLE's: 4.0x at TP=1, 4.0x at TP=4")
