"""The acceptance ledger (workbook.ledger) and the payoff figures (workbook.payoff): rows read from results
files and the workbook summary, never typed in; per-prompt counts and gaps for the paired rule."""

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
    ledger.record(**ledger.bench_rows(RUN, "09", "live")[0])
    rows = ledger.course_rows(data, {"parallel": tmp_path / "heads" / "p"}, tmp_path)
    assert [(r["chapter"], r["acceptance_length"]) for r in rows] == [("05", 1.4), ("09", 1.5), ("11", 1.3)]
    assert rows[2]["prompts"] == 4  # requests over the repeats
    assert [r["chapter"] for r in ledger.course_rows(data, {}, tmp_path, through="08")] == ["11"]  # 09's left out


def test_a_live_sweep_keeps_one_row_per_k():
    row = ledger.bench_rows(RUN, "04", "sweep")[0]
    for k, al in ((1, 1.25), (8, 1.5)):
        ledger.record(**(row | {"k": k, "acceptance_length": al}))
    assert [(r["k"], r["acceptance_length"]) for r in ledger.recorded()] == [(1, 1.25), (8, 1.5)]


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


def test_a_token_budget_cuts_the_constant_rate_acceptance_length_and_long_answers_reach_it():
    from peagle_lab.bench.oracle import constant_rate_acceptance_length
    assert bench.budget_acceptance_length(0.5, 7, 2) == pytest.approx(1.5)  # one token left: one draft
    short, long = (bench.budget_acceptance_length(0.8, 7, n) for n in (48, 100000))
    assert short < long == pytest.approx(constant_rate_acceptance_length(0.8, 7), rel=1e-3)


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


@pytest.mark.parametrize("wins, n, p", [(12, 16, 0.0768), (22, 24, 3.59e-05), (3, 3, 0.25), (0, 5, 0.0625),
                                        (1, 2, 1.0), (0, 0, 1.0)])
def test_the_sign_test_is_the_two_sided_binomial_tail(wins, n, p):
    assert payoff.sign_test(wins, n) == pytest.approx(p, rel=2e-3)


@pytest.mark.parametrize("hits, n", [(1, 2), (15, 45), (2, 15), (0, 1), (7, 7), (30, 200)])
def test_a_rate_interval_is_the_wilson_score_interval(hits, n):
    from scipy.stats import binomtest

    ci = binomtest(hits, n).proportion_ci(method="wilson")
    assert payoff.rate_interval(hits, n) == pytest.approx((ci.low, ci.high), abs=1e-4)
    assert payoff.rate_interval(0, 0) == (0.0, 1.0)
    assert payoff.rate_interval(n, n)[1] == 1.0 and payoff.rate_interval(0, n)[0] == 0.0  # exact at the edges
    with pytest.raises(ValueError, match="Fix"):
        payoff.rate_interval(3, 2)


def test_the_paired_verdict_needs_enough_prompts_not_every_prompt():
    assert payoff.paired_verdict(3, 3).endswith("not shown either way")  # three prompts cannot show an order
    assert payoff.paired_verdict(22, 24).endswith(": shown faster")  # two losses of 24 do not undo one
    assert payoff.paired_verdict(1, 24).endswith(": shown slower")
    with pytest.raises(ValueError, match="Fix"):
        payoff.sign_test(5, 4)


def test_the_paired_order_names_the_faster_row_and_leaves_ties_out():
    five = "A faster on 5 of 5 prompts, sign test p = 0.062: neither shown faster"
    assert payoff.paired_order([0.1] * 5, "A", "B") == five
    six_lost = "A faster on 0 of 6 prompts, sign test p = 0.031: B shown faster"  # the tie is left out
    assert payoff.paired_order([-0.1] * 6 + [0.0], "A", "B") == six_lost
    assert payoff.paired_order([0.2] * 20 + [-0.1] * 2, "A", "B").endswith(": A shown faster")


def test_the_verdict_word_reads_the_sign_test():
    assert [payoff.verdict_word(*c) for c in ((6, 6), (0, 6), (5, 6))] == ["shown faster", "shown slower", "not shown"]


def test_the_oracle_pair_is_the_best_one_pass_row_and_the_k_pass_row_at_its_k():
    run = {"methods": [method("oracle K=3", "oracle", 3, 1.2, 2.0), method("oracle K=7", "oracle", 7, 1.5, 3.0),
                       method("oracle-seq K=3", "oracle-sequential", 3, 1.1, 2.0),
                       method("oracle-seq K=7", "oracle-sequential", 7, 1.3, 3.0)]}
    assert [m["method"] for m in payoff.oracle_pair(run)] == ["oracle K=7", "oracle-seq K=7"]
    assert payoff.oracle_pair({"methods": []}) == (None, None)


@pytest.mark.parametrize("speedup, word", [(1.2, "faster"), (0.8, "slower"), (1.04, "about even"),
                                           (0.96, "about even"), (1.06, "faster")])
def test_one_run_reads_within_five_percent_of_1x_as_about_even(speedup, word):
    assert payoff.one_run_verdict(speedup).startswith(word)


def test_a_run_of_an_earlier_version_of_a_head_is_named_so():
    run = e2e(method("p-eagle K=4", "p-eagle", 4, 1.20, 1.5), method("eagle3 K=2", "eagle3", 2, 1.05, 1.6))
    run["config"]["parallel_head"]["draft_vocab_size"] = 8192
    run["config"]["sequential_head"]["draft_vocab_size"] = 4096
    heads = [r["head"] for r in ledger.bench_rows(run, "06", "committed", vocab_now={"p": 4096, "s": 4096})]
    assert heads == ["p (earlier version, 8,192 draft ids)", "s"]
    assert [r["head"] for r in ledger.bench_rows(run, "06", "committed")] == ["p", "s"]  # nothing to compare with
    # the rule itself, as 07 asks it of a committed run's head
    assert ledger.earlier_vocab(run["config"]["parallel_head"], {"p": 4096}) == 8192
    assert ledger.earlier_vocab(run["config"]["sequential_head"], {"s": 4096}) is None
    assert ledger.earlier_vocab(run["config"]["parallel_head"], None) is None


def test_a_serving_sweep_reads_its_recorded_dtype_else_names_the_setting_it_assumes():
    assert ledger.serving_dtype({"engine": {"dtype": "bfloat16"}}) == "bfloat16"
    assumed = ledger.serving_dtype({"environment": {"device": "cpu"}})
    assert assumed.startswith("float32 ") and "CPU setting" in assumed and "predates" in assumed
