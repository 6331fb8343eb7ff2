"""The acceptance ledger (workbook.ledger) and the payoff sentences (workbook.payoff): rows read from results
files and the workbook summary, never typed in; verdicts computed against the run's own noise band."""

from __future__ import annotations

import json

import pytest

from peagle_lab.errors import PeagleError
from peagle_lab import bench
from peagle_lab.workbook import ledger, payoff


@pytest.fixture(autouse=True)
def results(monkeypatch, tmp_path):
    monkeypatch.setenv("PEAGLE_RESULTS", str(tmp_path / "results"))
    monkeypatch.delenv("PEAGLE_NOTEBOOK", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)


def method(name, family, k, speedup, al, rounds=10, iqr=0.1):
    return {"method": name, "family": family, "k": k, "speedup": speedup, "speedup_iqr": iqr,
            "acceptance_length": al, "rounds": rounds}


def e2e(*methods, suite="code"):
    return {"config": {"suite": suite, "prompts": "HumanEval", "n_prompts": 3, "max_new_tokens": 16,
                       "parallel_head": {"source": "heads/p"}, "sequential_head": {"source": "heads/s"}},
            "env": {"host": "cpu-x", "dtype": "bfloat16"}, "methods": list(methods)}


RUN = e2e(method("plain", "plain", None, 1.0, 1.0), method("p-eagle K=1", "p-eagle", 1, 1.10, 1.3, rounds=40),
          method("p-eagle K=4", "p-eagle", 4, 1.20, 1.5, rounds=30), method("eagle3 K=2", "eagle3", 2, 1.05, 1.6),
          method("hf-greedy", "hf-greedy", None, 0.98, 1.0))


def test_a_row_missing_a_column_is_refused_naming_it():
    with pytest.raises(PeagleError, match=r"missing \['rounds'"):
        ledger.row(**{c: 1 for c in ledger.COLUMNS if c != "rounds"})


def test_bench_rows_take_each_head_at_its_best_speedup_with_its_rounds_and_settings():
    rows = ledger.bench_rows(RUN, "05", "test")
    assert [(r["head"], r["k"], r["acceptance_length"], r["rounds"]) for r in rows] == [("p", 4, 1.5, 30),
                                                                                        ("s", 2, 1.6, 10)]
    assert rows[0]["prompts"] == 3 and rows[0]["new_tokens"] == 16 and rows[0]["dtype"] == "bfloat16"


def test_recorded_rows_come_back_from_the_summary_in_chapter_order():
    row = ledger.bench_rows(RUN, "07", "later")[0]
    ledger.record(**row)
    ledger.record(**(row | {"chapter": "04", "what": "earlier"}))
    assert [r["chapter"] for r in ledger.recorded()] == ["04", "07"]


def test_a_ledger_through_a_chapter_leaves_out_rows_later_chapters_left_in_the_folder():
    row = ledger.bench_rows(RUN, "05", "live")[0]
    for chapter in ("00", "05", "06", "07"):
        ledger.record(**(row | {"chapter": chapter, "what": f"run of {chapter}"}))
    assert [r["chapter"] for r in ledger.recorded("05")] == ["00", "05"]
    assert [r["chapter"] for r in ledger.recorded()] == ["00", "05", "06", "07"]


def test_heldout_rows_read_the_shipped_head_by_its_path(tmp_path):
    path = tmp_path / "compare.json"
    path.write_text(json.dumps({"host": "h", "prompts": ["a", "b"], "max_new_tokens": 64, "dtype": "bfloat16",
                                "rows": [{"path": "heads/p", "acceptance_length": {"3": 1.1, "7": 1.2}},
                                         {"path": "heads/other", "acceptance_length": {"7": 9.0}}]}))
    rows = ledger.heldout_rows(path, {"parallel": tmp_path / "heads" / "p"}, tmp_path)
    assert [(r["k"], r["acceptance_length"], r["prompts"]) for r in rows] == [(3, 1.1, 2), (7, 1.2, 2)]
    assert ledger.heldout_rows(tmp_path / "absent.json", {}, tmp_path) == []


def test_the_verdict_line_names_the_faster_head_by_the_same_rule_as_the_paired_line():
    assert "+0.150x, outside the noise band 0.020; which head is faster: P-EAGLE faster" in payoff.verdict(RUN)
    close = e2e(method("p-eagle K=2", "p-eagle", 2, 1.10, 1.4), method("eagle3 K=1", "eagle3", 1, 1.11, 1.4),
                method("hf-greedy", "hf-greedy", None, 0.95, 1.0))
    assert ("-0.010x, inside the noise band 0.050; which head is faster: neither head is shown faster"
            in payoff.verdict(close))
    assert "EAGLE-3 faster on every prompt" in payoff.verdict(paired_run([-0.1, -0.2]))


def test_a_best_k_of_1_is_said_not_to_test_parallel_drafting():
    k1 = e2e(method("p-eagle K=1", "p-eagle", 1, 1.2, 1.4), method("eagle3 K=2", "eagle3", 2, 1.1, 1.4))
    assert "at K=1 parallel and sequential drafting are one and the same" in payoff.verdict(k1)
    assert "one and the same" not in payoff.verdict(RUN)


def test_the_course_ledger_joins_committed_files_and_recorded_rows_in_chapter_order(tmp_path):
    data = tmp_path / "data"
    (data / "recipe" / "h").mkdir(parents=True)
    (data / "recipe" / "h" / "heldout_compare.json").write_text(json.dumps(
        {"host": "h", "prompts": ["a"], "max_new_tokens": 8, "dtype": "float32",
         "rows": [{"path": "heads/p", "acceptance_length": {"7": 1.4}}]}))
    (data / "results" / "h" / "serving").mkdir(parents=True)
    (data / "results" / "h" / "serving" / "serving_sweep.json").write_text(json.dumps(
        {"meta": {"host": "h", "head": "p", "k": 7, "max_tokens": 8, "concurrencies": [1]},
         "rows": [{"config": "peagle", "concurrency": 1, "ok": 2, "acceptance_length": 1.2},
                  {"config": "peagle", "concurrency": 1, "ok": 2, "acceptance_length": 1.4}]}))
    ledger.record(**ledger.bench_rows(RUN, "07", "live")[0])
    rows = ledger.course_rows(data, {"parallel": tmp_path / "heads" / "p"}, tmp_path)
    assert [(r["chapter"], r["acceptance_length"]) for r in rows] == [("04", 1.4), ("06", 1.3), ("07", 1.5)]
    assert rows[1]["prompts"] == 4  # requests over the repeats
    assert [r["chapter"] for r in ledger.course_rows(data, {}, tmp_path, through="06")] == ["06"]
    assert ledger.spread_lines(rows) == ["p: 1.30 (06, vLLM serving sweep, 1 concurrent (committed), K=7) to "
                                         "1.50 (07, live, best speed-up, K=4)"]


def test_prompt_lookup_is_set_against_the_better_head():
    run = e2e(*RUN["methods"], method("prompt-lookup K=10", "prompt-lookup", 10, 1.6, 2.0))
    assert "it beats the better head (1.20x)" in payoff.lookup_line(run)
    assert payoff.lookup_line(RUN) is None


def test_a_live_sweep_keeps_one_row_per_k_and_the_table_shows_three_decimals():
    row = ledger.bench_rows(RUN, "04", "sweep")[0]
    for k, al in ((1, 1.25), (8, 1.5)):
        ledger.record(**(row | {"k": k, "acceptance_length": al}))
    assert [(r["k"], r["acceptance_length"]) for r in ledger.recorded()] == [(1, 1.25), (8, 1.5)]
    assert "| 1.250 |" in ledger.markdown(ledger.recorded())


def paired_run(gaps):
    """RUN with per-prompt runs whose P-EAGLE (K=4) minus EAGLE-3 (K=2) speed-ups are ``gaps``."""
    runs = []
    for i, g in enumerate(gaps):
        runs += [{"prompt": i, "method": "p-eagle K=4", "speedup_vs_plain": 1.0 + g,
                  "stats": {"accepted_at": [2, 1, 0, 0], "attempted_at": [4, 2, 1, 0]}},
                 {"prompt": i, "method": "eagle3 K=2", "speedup_vs_plain": 1.0}]
    return RUN | {"runs": runs}


def test_the_paired_line_names_a_faster_head_only_when_every_prompt_agrees():
    assert "P-EAGLE faster on every prompt" in payoff.paired_line(paired_run([0.1, 0.2]))
    assert "+0.100x to +0.200x" in payoff.paired_line(paired_run([0.1, 0.2]))
    assert "neither head is shown faster" in payoff.paired_line(paired_run([-0.05, 0.2]))
    assert payoff.paired_line(RUN) is None


def test_slot_counts_sum_accepted_and_reached_rounds_over_the_prompts():
    assert payoff.slot_counts(paired_run([0.1, 0.2]), "p-eagle K=4") == [(4, 8), (2, 4), (0, 2), (0, 0)]
    assert payoff.slots_text(RUN, "p-eagle K=4") == "not recorded"


def test_the_paper_acceptance_pays_its_length_over_a_round_in_decode_steps():
    dc = {"target_step_ms": 10.0, "rows": [{"k": 7, "parallel_ms": 5.0, "verify_ms": 15.0}]}
    pay = payoff.paper_round_pay(dc, 7)
    assert pay["acceptance_length"] == pytest.approx(3.94, abs=1e-3)
    assert pay["round_steps"] == 2.0 and pay["ideal_speedup"] == pytest.approx(1.97, abs=1e-3)
    assert payoff.paper_round_pay(dc, 3) is None


def test_the_box_quotes_cost_slots_speed_and_order_from_the_results():
    dc = {"target_step_ms": 10.0, "rows": [{"k": 1, "parallel_ms": 2.0, "sequential_ms": 2.0, "verify_ms": 12.0,
                                             "ratio_seq_over_par": 1.0},
                                            {"k": 7, "parallel_ms": 3.0, "sequential_ms": 14.0, "verify_ms": 15.0,
                                             "ratio_seq_over_par": 4.7}]}
    slow = paired_run([-0.05, 0.2])
    slow["methods"] = [m | {"speedup": m["speedup"] - 0.5} for m in slow["methods"]]
    text = payoff.box(slow, dc, "here")
    assert text.startswith("> **What this machine shows") and "2.0 ms at K=1, 3.0 ms at K=7" in text and "4.7x" in text
    assert "4/8 2/4 0/2 0/0" in text and "below 1x" in text and "neither head is shown faster" in text
    assert "1.80 decode steps" in text


def test_host_run_prefers_this_hosts_folder_in_this_dtype():
    def folder(host, dtype, stamp):
        return {"host": host, "dtype": dtype, "dir": f"{host}/{dtype}",
                "results": {"end_to_end": RUN | {"env": {"timestamp_utc": stamp}}}}
    committed = [folder("a", "float32", "2"), folder("a", "bfloat16", "1"), folder("b", "float32", "3")]
    assert payoff.host_run(committed, "a", "bfloat16")["dir"] == "a/bfloat16"
    assert payoff.host_run(committed, "c", "float32")["dir"] == "b/float32"


def test_every_k_keeps_each_heads_whole_sweep_and_marks_the_best_row():
    rows = ledger.bench_rows(RUN, "05", "live", every_k=True)
    assert [(r["head"], r["k"], r["what"]) for r in rows] == [
        ("p", 1, "live, K sweep"), ("p", 4, "live, best speed-up"), ("s", 2, "live, best speed-up")]


def test_the_paired_median_of_an_even_count_is_the_mean_of_the_middle_two():
    assert "(median +0.150x)" in payoff.paired_line(paired_run([0.1, 0.2]))


def test_a_token_budget_cuts_the_constant_rate_acceptance_length_and_long_answers_reach_it():
    from peagle_lab.bench.oracle import constant_rate_acceptance_length
    assert bench.budget_acceptance_length(0.5, 7, 2) == pytest.approx(1.5)  # one token left: one draft
    short, long = (bench.budget_acceptance_length(0.8, 7, n) for n in (48, 100000))
    assert short < long == pytest.approx(constant_rate_acceptance_length(0.8, 7), rel=1e-3)


def test_the_oracle_line_gives_the_acceptance_length_its_rate_reaches_within_the_token_budget():
    run = e2e(method("oracle K=7", "oracle", 7, 1.5, 3.4, rounds=42))
    line = payoff.oracle_line(run)
    assert "targets 3.94" in line and "answers of 16 new tokens cut to" in line and "42 rounds" in line


def test_the_claim_line_sets_the_two_drafting_charges_of_one_acceptance_side_by_side():
    par = method("oracle (paper's acceptance) K=7", "oracle", 7, 1.50, 3.4, rounds=40)
    seq = method("oracle (paper's acceptance, sequential drafting) K=7", "oracle-sequential", 7, 1.20, 3.4, rounds=40)
    runs = [{"prompt": i, "method": m["method"], "speedup_vs_plain": m["speedup"] + d}
            for i, d in enumerate((0.0, 0.1)) for m in (par, seq)]
    line = payoff.claim_line(e2e(*RUN["methods"], par, seq) | {"runs": runs})
    assert "one parallel pass per round 1.50x, 7 sequential passes 1.20x" in line
    assert "parallel drafting is 25% faster end to end, faster on 2 of 2 prompt runs" in line
    assert "20% slower" in payoff.claim_line(e2e(par | {"speedup": 0.96}, seq))
    assert payoff.claim_line(e2e(*RUN["methods"], par)) is None  # no sequential charge in the run


def test_the_cost_line_states_how_much_each_round_grows_with_k():
    dc = {"rows": [{"k": 1, "parallel_ms": 8.0, "sequential_ms": 8.0, "ratio_seq_over_par": 1.0},
                   {"k": 10, "parallel_ms": 12.0, "sequential_ms": 50.0, "ratio_seq_over_par": 4.17}]}
    line = payoff._cost_line(dc)
    assert "8.0 ms at K=1, 12.0 ms at K=10 (1.50x" in line and "8.0 to 50.0 ms (6.2x" in line


def test_the_claim_line_also_names_sequential_drafting_at_its_own_best_k():
    par = method("oracle (paper's acceptance) K=7", "oracle", 7, 1.50, 3.4, rounds=40)
    seq7 = method("oracle (paper's acceptance, sequential drafting) K=7", "oracle-sequential", 7, 1.20, 3.4)
    seq3 = method("oracle (paper's acceptance, sequential drafting) K=3", "oracle-sequential", 3, 1.30, 2.6)
    assert "sequential drafting at its own best K=3: 1.30x" in payoff.claim_line(e2e(par, seq7, seq3))
    assert "own best" not in payoff.claim_line(e2e(par, seq7))


def test_the_box_states_the_claim_where_the_run_replayed_both_drafting_costs():
    par = method("oracle (paper's acceptance) K=7", "oracle", 7, 1.50, 3.4, rounds=40)
    seq = method("oracle (paper's acceptance, sequential drafting) K=7", "oracle-sequential", 7, 1.20, 3.4, rounds=40)
    assert "P-EAGLE's claim at equal acceptance" in payoff.box(e2e(*RUN["methods"], par, seq), None, "here")
    assert "P-EAGLE's claim" not in payoff.box(RUN, None, "here")


def test_logbook_fixes_chapter_host_and_dtype_and_reads_a_loops_stats(tmp_path, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setenv("PEAGLE_RESULTS", str(tmp_path))
    book = ledger.Logbook("00", host="host-a", dtype="float32")
    r = book.add("a run", "head-x", prompt_set="one prompt", prompts=1, new_tokens=8, k=4,
                 stats=SimpleNamespace(rounds=5, acceptance_length=1.6))
    assert (r["chapter"], r["host"], r["dtype"], r["rounds"], r["acceptance_length"]) == ("00", "host-a", "float32",
                                                                                         5, 1.6)
    with pytest.raises(PeagleError, match="missing"):
        book.add("no k", "head-x", prompt_set="one prompt", prompts=1, new_tokens=8, rounds=1, acceptance_length=1.0)
