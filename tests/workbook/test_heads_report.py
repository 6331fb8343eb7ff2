"""05's plots (workbook.heads_report): the held-out comparison, and the learning curves."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from peagle_lab.workbook import heads_report  # noqa: E402


@pytest.fixture
def shown(monkeypatch):
    """The figures plt.show would have shown: per axis, its title and its lines' (label, x, y)."""
    figures = []

    def show():
        fig = plt.gcf()
        figures.append([(ax.get_title(), [(ln.get_label(), list(ln.get_xdata()), list(ln.get_ydata()))
                                          for ln in ax.get_lines()]) for ax in fig.axes])
        plt.close(fig)

    monkeypatch.setattr(plt, "show", show)
    return figures


P = {"path": "heads/p", "acceptance_length": {"3": 1.8, "7": 1.9}, "per_position": {"3": [0.6, 0.5, None]}}
S = {"path": "heads/s", "acceptance_length": {"3": 2.1, "7": 2.5}, "per_position": {"3": [0.5, 0.7, 0.6]},
     "attempted": {"3": [40, 20, 14]}}


def test_the_comparison_plot_draws_each_committed_row_pooled(shown):
    heads_report.plot_heldout({"parallel": P, "sequential": None}, "held-out")
    [(title, lines)] = shown[0]
    assert title == "held-out"
    assert lines == [("P-EAGLE (parallel), pooled", [3, 7], [1.8, 1.9])]  # no committed EAGLE-3 row: no line


CURVE = [{"mode": "parallel", "run": "p2", "tokens_seen": 4000, "acceptance_length": 1.4},
         {"mode": "parallel", "run": "p1", "tokens_seen": 1000, "acceptance_length": 1.1}]
DEEPER = [{"run": "exp-L1", "tokens_seen": 100, "acceptance_length": 1.2},
          {"run": "exp-L1", "tokens_seen": 300, "acceptance_length": 1.3},
          {"run": "exp-L2", "tokens_seen": 200, "acceptance_length": 1.25}]


def test_the_curves_plot_one_line_per_run_sorted_by_tokens(shown):
    heads_report.plot_curves(CURVE, DEEPER)
    (_, left), (_, right) = shown[0]
    assert left == [("parallel", [1000, 4000], [1.1, 1.4])]
    assert [label for label, _, _ in right] == ["exp-L1", "exp-L2"]


def test_a_continued_run_is_drawn_hollow_and_named(monkeypatch):
    import matplotlib.pyplot as plt

    drawn = []
    monkeypatch.setattr(plt, "show", lambda: drawn.append(plt.gcf()))
    heads_report.plot_curves(CURVE, DEEPER)
    left, right = drawn[0].axes
    [hollow] = left.collections  # p2 continues p1: its point, hollow, named in the legend
    assert hollow.get_offsets().tolist() == [[4000, 1.4]] and hollow.get_label() == "parallel: continued (p2)"
    assert not right.collections  # one run per line: nothing continued
    plt.close("all")


def test_the_heldout_lines_rebuild_al_from_the_slot_rates_and_name_who_accepts_more():
    lines = heads_report.heldout_lines(P, S, n_prompts=2, n_new=10, tie=0.05)
    assert lines[0] == "  K=3: P-EAGLE 1.800, EAGLE-3 2.100, gap +0.300: EAGLE-3 accepts more per round"
    assert "  K=7: P-EAGLE 1.900, EAGLE-3 2.500" in lines[1]
    s_rates = next(line for line in lines if line.startswith("  EAGLE-3"))
    assert s_rates == "  EAGLE-3  0.50 (40)  0.70 (20)  0.60 (14)"  # counted rounds where the row has them
    s_al = lines[lines.index(s_rates) + 1]
    assert s_al.endswith(f"= {1 + 0.5 + 0.35 + 0.21:.3f}   (recorded 2.100)")
    p_rates = next(line for line in lines if line.startswith("  P-EAGLE"))
    assert p_rates.endswith("-") and "(~" in p_rates  # an unreached slot; rounds estimated from tokens / AL


def test_the_live_lines_print_this_runs_gap_and_the_heldout_verdict_beside_it():
    live = {"parallel": {"acceptance_length": {3: 1.50, 5: 1.6}}, "sequential": {"acceptance_length": {3: 1.52, 5: 1.4}}}
    lines = heads_report.live_lines(P, S, live, [3, 5], tie=0.05)
    assert lines[0] == "this run, K=3: P-EAGLE 1.50, EAGLE-3 1.52 (gap +0.02); held-out: EAGLE-3 accepts more (gap +0.30)"
    assert lines[1] == "this run, K=5: P-EAGLE 1.60, EAGLE-3 1.40 (gap -0.20)"  # no K=5 in the file
    close = dict(S, acceptance_length={"3": 1.82, "7": 2.5})
    assert heads_report.live_lines(P, close, live, [3], tie=0.05)[0].endswith("held-out: a tie (gap +0.02)")


def _row(al: float, per_prompt: list[list[int]]) -> dict:
    return {"acceptance_length": {"7": al}, "per_position": {}, "per_prompt": {"7": per_prompt}}


def test_prompt_spread_judges_the_gap_by_its_prompts():
    """EAGLE-3 ahead on all 8 prompts is shown (sign test p = 2/256); the bootstrap interval holds the pooled gap
    and lies above zero; on identical rows the interval is a point at zero and nothing is shown."""
    pp = [[10, 3 + i % 2] for i in range(8)]
    ps = [[8, 6 + i % 3] for i in range(8)]
    P, S = _row(1.0, pp), _row(1.0, ps)
    spread = heads_report.prompt_spread(P, S, "7")
    pooled = (1 + sum(a for _, a in ps) / sum(r for r, _ in ps)) - (1 + sum(a for _, a in pp) / sum(r for r, _ in pp))
    lo, hi = spread["interval"]
    assert 0 < lo <= pooled <= hi
    assert spread["verdict"] == "EAGLE-3 shown to accept more" and "8 of 8 prompts, sign test p = 0.0078" in spread["order"]
    same = heads_report.prompt_spread(P, _row(1.0, pp), "7")
    assert same["interval"] == (0.0, 0.0) and same["verdict"] == "neither shown to accept more"
    assert heads_report.prompt_spread(P, {"acceptance_length": {"7": 1.0}}, "7") is None  # a row without counts
