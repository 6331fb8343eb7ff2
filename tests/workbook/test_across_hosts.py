"""peagle_lab.workbook.across_hosts: 07's table cells, on small synthetic rows."""

from __future__ import annotations

from peagle_lab.workbook import across_hosts as ah


def _method(family, k, speedup, al=1.5, **kw):
    return {"method": f"{family} K={k}", "family": family, "k": k, "speedup": speedup, "acceptance_length": al, **kw}


def test_best_text_names_k_al_and_divergences():
    assert ah.best_text(None) == "-"
    assert ah.best_text(_method("p-eagle", 3, 1.234, 1.5)) == "1.23x (K=3, AL 1.50)"
    assert ah.best_text(_method("p-eagle", 3, 1.2, 1.5, divergences=2, runs=24)) == "1.20x (K=3, AL 1.50, 2/24 diverge)"
    assert ah.best_text(_method("p-eagle", 3, 1.2, 1.5, divergences=2, runs=24, max_divergence_margin=0.125)) == (
        "1.20x (K=3, AL 1.50, 2/24 diverge, margin <= 0.125)")
