"""05's committed-run report (workbook.round_report): the round's cost in decode steps, the paired rule against
plain decoding in words, the oracle row it reads, the summary and lists tables and their printed lines."""

from __future__ import annotations

import json

import pytest

from peagle_lab.workbook import round_report


@pytest.fixture(autouse=True)
def default_target(monkeypatch):
    monkeypatch.delenv("PEAGLE_TARGET", raising=False)


def row(method, family, k, speedup, al, draft=1.0, verify=9.0, step=5.0, decode=None):
    return {"method": method, "family": family, "k": k, "speedup": speedup, "acceptance_length": al,
            "t_draft_round_ms": draft, "t_verify_round_ms": verify, "t_step_ms": step, "decode_speedup": decode,
            "per_position_acceptance": [0.5, 0.25][:k]}


def runs(method, *speedups, tokens=(5, 20)):
    return [{"method": method, "prompt": i, "speedup_vs_plain": s, "new_tokens": tokens[i % len(tokens)]}
            for i, s in enumerate(speedups)]


def e2e(methods, per_prompt, suite="code"):
    return {"config": {"suite": suite, "n_prompts": 2, "max_new_tokens": 16}, "methods": methods,
            "runs": per_prompt, "all_lossless": True, "lossless_regime": "exact", "env": {}}


def bench_run():
    methods = [row("p-eagle K=2", "p-eagle", 2, 0.8, 1.5, decode=0.78),
               row("eagle3 K=2", "eagle3", 2, 0.9, 1.6, draft=3.0),
               {"method": "lookup", "family": "prompt-lookup", "k": 4, "speedup": 1.3, "acceptance_length": 2.6},
               row("oracle K=2", "oracle", 2, 1.5, 3.0), row("oracle-seq K=2", "oracle-sequential", 2, 1.4, 3.0)]
    return e2e(methods, runs("p-eagle K=2", 0.7, 0.9) + runs("eagle3 K=2", 1.1, 0.8) + runs("lookup", 1.2, 1.4))


def host(res, name="cpu-x/float32"):
    return {"dir": name, "results": {"end_to_end": res, "drafting_cost": {"rows": [
        {"k": 1, "parallel_ms": 2.0, "sequential_ms": 2.0}, {"k": 8, "parallel_ms": 4.0, "sequential_ms": 16.0}]}}}


def test_a_round_costs_draft_plus_verify_over_a_step():
    assert round_report.round_steps(row("a", "p-eagle", 2, 1.0, 1.0, draft=1.0, verify=9.0, step=5.0)) == 2.0


def test_the_paper_target_is_humaneval_on_code_and_mt_bench_on_chat():
    al, name = round_report.paper_target("code", 7)
    assert name == "HumanEval" and al == pytest.approx(3.94, abs=0.01)
    al, name = round_report.paper_target("chat", 7)
    assert name == "MT-Bench" and al == pytest.approx(3.70, abs=0.01)


@pytest.mark.parametrize("speedups, words", [
    ((1.2,) * 6, "faster on 6 of 6 prompts, sign test p = 0.031: shown faster"),
    ((0.9,) * 6, "faster on 0 of 6 prompts, sign test p = 0.031: shown slower"),
    ((1.2, 1.1, 1.3), "faster on 3 of 3 prompts, sign test p = 0.25: not shown either way"),
    ((1.2, 0.9), "faster on 1 of 2 prompts, sign test p = 1: not shown either way")])
def test_against_plain_states_the_paired_rule(speedups, words):
    m = row("a", "p-eagle", 2, 1.0, 1.0)
    assert round_report.against_plain(e2e([m], runs("a", *speedups)), m) == words


def test_the_summary_label_names_the_run():
    line = round_report.summary_label(host(bench_run()), bench_run())
    assert line.startswith("cpu-x/float32, `code` suite, 2 prompts x 16 new tokens: committed results of")


def test_the_lists_label_counts_held_out_prompts():
    assert round_report.lists_label({"dir": "h/float32"}, bench_run()).startswith(
        "h/float32, `lists` suite, 2 held-out prompts x 16 new tokens")


def test_the_list_heads_lines_read_each_record_and_the_slower_answers(tmp_path, capsys):
    heads = {}
    for kind in ("parallel", "sequential"):
        heads[kind] = tmp_path / kind
        heads[kind].mkdir()
        (heads[kind] / "training.json").write_text(json.dumps({
            "config": {"init_from": f"heads/{kind}-base"}, "train_time_s": 60.4, "tokens_seen": 12345,
            "data": {"sequences": 10, "response_tokens": 2000}, "machine": {"host": "cpu-x"}, "autocast": "float32"}))
    round_report.print_list_heads(bench_run(), heads)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("P-EAGLE head: parallel-base continued 60 s on 10 answers (2,000 answer tokens), 12,345 tokens "
                      "seen, cpu-x, float32")
    assert out[1].endswith("per-slot rates 0.50 0.25; against plain: faster on 0 of 2 prompts, sign test p = 0.5: "
                           "not shown either way")
    assert out[2] == "  slower than plain on 2 prompts, whose answers have [5, 20] tokens (the budget is 16)"
    assert out[5] == "  slower than plain on 1 prompts, whose answers have [20] tokens (the budget is 16)"


def test_a_matched_head_says_its_seeded_start_and_steps_and_each_rate_its_rounds(tmp_path, capsys):
    heads = {kind: tmp_path / kind for kind in ("parallel", "sequential")}
    for kind, path in heads.items():
        path.mkdir()
        (path / "training.json").write_text(json.dumps({
            "config": {"init_from": None, "seed": 0}, "steps_done": 1000, "train_time_s": 1500.2, "tokens_seen": 9,
            "data": {"sequences": 10, "response_tokens": 2000}, "machine": {"host": "cpu-x"}, "autocast": "float32"}))
    run = bench_run()
    run["methods"][0]["per_position_attempts"] = [40, 20]
    run["methods"][1]["per_position_acceptance"] = [0.5, None]
    round_report.print_list_heads(run, heads)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("P-EAGLE head: seed 0's untrained weights, 1,000 steps in 1500 s, on 10 answers")
    assert "per-slot rates 0.50 (40) 0.25 (20); against plain" in out[1]
    assert "per-slot rates 0.50 not reached; against plain" in out[4]
