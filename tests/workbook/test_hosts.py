"""12's results across hosts (workbook.hosts): a row per committed run and suite, and the paired rule's verdicts."""

from __future__ import annotations

from peagle_lab.workbook import hosts


def method(name, family, k, speedup, al, divergences=0, margin=None):
    return {"method": name, "family": family, "k": k, "speedup": speedup, "acceptance_length": al, "runs": 6,
            "divergences": divergences, "max_divergence_margin": margin}


def run(p_wins, e_wins, n=6, with_oracle=True):
    """One committed run: P-EAGLE beats plain on `p_wins` of `n` prompts, EAGLE-3 on `e_wins`; the oracle's one
    pass beats its K passes on every prompt."""
    methods = [method("p-eagle K=3", "p-eagle", 3, 1.2, 1.5, 2, 0.125), method("eagle3 K=1", "eagle3", 1, 1.1, 1.4),
               method("prompt-lookup K=10", "prompt-lookup", 10, 1.9, 2.7)]
    runs = [{"method": "p-eagle K=3", "prompt": i, "speedup_vs_plain": 1.3 if i < p_wins else 0.9} for i in range(n)]
    runs += [{"method": "eagle3 K=1", "prompt": i, "speedup_vs_plain": 1.2 if i < e_wins else 0.8} for i in range(n)]
    if with_oracle:
        methods += [method("oracle K=7", "oracle", 7, 2.0, 3.9), method("oracle-seq K=7", "oracle-sequential", 7, 1.8,
                                                                         3.9)]
        runs += [{"method": m, "prompt": i, "speedup_vs_plain": s} for i in range(n)
                 for m, s in (("oracle K=7", 2.0), ("oracle-seq K=7", 1.8))]
    e2e = {"config": {"suite": "code", "n_prompts": n, "max_new_tokens": 32}, "methods": methods, "runs": runs,
           "lossless_regime": "near-tie"}
    dc = {"target_step_ms": 50.0, "rows": [{"k": 7, "verify_ms": 55.0}]}
    return {"results": {"end_to_end": e2e, "drafting_cost": dc}}


def test_a_row_per_run_with_speed_and_divergences_in_their_own_columns():
    committed = [dict(run(6, 3), host="a", dtype="bfloat16", dir="a/bfloat16"),
                 dict(run(0, 0, with_oracle=False), host="b", dtype="float32", dir="b/float32")]
    rows = hosts.suite_tables(committed, "a")["code"]
    assert [r["host"] for r in rows] == ["a (this machine)", "b"]
    assert rows[0]["P-EAGLE"] == "1.20x (K=3, AL 1.50)" and rows[0]["verify_k7"] == 1.1
    assert rows[0]["diverged (P / E / lookup)"] == "2/6 / 0/6 / 0/6 (margin <= 0.125)"
    assert rows[0]["faster than plain (P / E)"] == "6/6 / 3/6"
    assert rows[0]["oracle (1 / K passes)"] == "2.00x / 1.80x" and rows[1]["oracle (1 / K passes)"] == "-"


def test_a_run_of_earlier_heads_says_so_in_its_host_cell():
    older = run(6, 3)
    older["results"]["end_to_end"]["config"]["parallel_head"] = {"source": "data/heads/p", "draft_vocab_size": 8192}
    committed = [dict(older, host="a", dtype="float32", dir="a/float32"),
                 dict(run(6, 3), host="a", dtype="bfloat16", dir="a/bfloat16")]
    rows = hosts.suite_tables(committed, "b", vocab_now={"p": 4096})["code"]
    assert [r["host"] for r in rows] == ["a (earlier heads, 8,192 draft ids)", "a"]
    assert [r["host"] for r in hosts.suite_tables(committed, "b")["code"]] == ["a", "a"]  # nothing to compare with


def test_the_verdicts_read_each_count_by_the_sign_test():
    committed = [dict(run(6, 3), host="a", dtype="bfloat16", dir="a/bfloat16"),
                 dict(run(0, 0, with_oracle=False), host="b", dtype="float32", dir="b/float32")]
    lines = hosts.verdict_lines(committed)
    assert lines[0].startswith("against plain decoding, bfloat16: of 2 best speed-ups, 1 shown faster, 0 shown slower,"
                               " 1 not shown")  # 6 of 6 gives p = 0.031; 3 of 6 does not
    assert lines[1].startswith("against plain decoding, float32: of 2 best speed-ups, 0 shown faster, 2 shown slower")
    assert lines[2] == "one head against the other: shown faster in 2 of 2 runs"  # P-EAGLE ahead on every prompt
    assert lines[3].endswith("one pass faster on 6 of 6 prompts (p = 0.031): shown faster")
