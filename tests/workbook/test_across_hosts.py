"""peagle_lab.workbook.across_hosts: 07's table rows and verdict lines, on small synthetic runs."""

from __future__ import annotations

from peagle_lab.workbook import across_hosts as ah
from peagle_lab.workbook import payoff


paired_word = payoff.verdict_word


def _method(family, k, speedup, al=1.5, **kw):
    return {"method": f"{family} K={k}", "family": family, "k": k, "speedup": speedup, "acceptance_length": al, **kw}


def _run(host, dtype, p, s, oracle=None):
    """One committed run with one suite: ``p`` and ``s`` are the heads' per-prompt speed-ups."""
    n = len(p)
    methods = [_method("p-eagle", 2, sum(p) / n), _method("p-eagle", 4, 0.1), _method("eagle3", 3, sum(s) / n)]
    runs = [{"method": "p-eagle K=2", "prompt": i, "speedup_vs_plain": v} for i, v in enumerate(p)]
    runs += [{"method": "eagle3 K=3", "prompt": i, "speedup_vs_plain": v} for i, v in enumerate(s)]
    if oracle:
        (par, seq) = oracle
        methods += [_method("oracle", 7, sum(par) / n), _method("oracle-sequential", 7, sum(seq) / n)]
        runs += [{"method": "oracle K=7", "prompt": i, "speedup_vs_plain": v} for i, v in enumerate(par)]
        runs += [{"method": "oracle-sequential K=7", "prompt": i, "speedup_vs_plain": v} for i, v in enumerate(seq)]
    e = {"config": {"n_prompts": n, "max_new_tokens": 8}, "methods": methods, "runs": runs,
         "lossless_regime": "exact"}
    dc = {"target_step_ms": 10.0, "rows": [{"k": 7, "verify_ms": 15.0, "verify_ratio": 1.5, "parallel_ms": 5.0}]}
    return {"host": host, "dtype": dtype, "dir": f"{host}/{dtype}",
            "results": {"drafting_cost": dc, "suites": {"code": e}}}


def test_best_text_names_k_al_and_divergences():
    assert ah.best_text(None) == "-"
    assert ah.best_text(_method("p-eagle", 3, 1.234, 1.5)) == "1.23x (K=3, AL 1.50)"
    assert ah.best_text(_method("p-eagle", 3, 1.2, 1.5, divergences=2, runs=24)) == "1.20x (K=3, AL 1.50, 2/24 diverge)"
    assert ah.best_text(_method("p-eagle", 3, 1.2, 1.5, divergences=2, runs=24, max_divergence_margin=0.125)) == (
        "1.20x (K=3, AL 1.50, 2/24 diverge, margin <= 0.125)")


def test_print_verdicts_counts_the_paired_rule_per_dtype(capsys):
    ah.print_verdicts([_run("a", "float32", [1.2, 0.8] * 3, [1.1] * 6),
                       _run("b", "bfloat16", [1.4, 1.2] * 3, [0.9, 0.7] * 3, oracle=([2] * 6, [1, 3] * 3))],
                      paired_word)
    f32, bf16, which, oracle = capsys.readouterr().out.splitlines()
    assert f32 == ("verdict, float32: of 2 best speed-ups (2 heads x 1 host/suite runs) 1 shown faster than plain "
                   "decoding, 0 shown slower, 1 not shown either way; best speed-ups 1.00x to 1.10x")
    assert bf16.startswith("verdict, bfloat16: of 2 best speed-ups (2 heads x 1 host/suite runs) 1 shown faster "
                           "than plain decoding, 1 shown slower, 0 not shown either way")
    assert which.startswith("verdict, which head: one head shown faster than the other in 1 of 2 runs; in the rest")
    assert oracle.endswith("code on b/bfloat16 2.00x against 2.00x, parallel faster on 3 of 6 prompts, sign test "
                           "p = 1: not shown either way")


def test_print_verdicts_without_an_oracle_says_not_run(capsys):
    ah.print_verdicts([_run("a", "float32", [1.2, 1.3] * 3, [0.9, 1.0] * 3)], paired_word)
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "verdict, which head: one head shown faster than the other in 1 of 1 runs"
    assert out[2].endswith("same draws: not run")
