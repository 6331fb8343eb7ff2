"""04's committed heads report (workbook.heads_report): the training records, the held-out comparison with AL
rebuilt from slot rates, the live check's verdict against it, and the learning curves."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from peagle_lab.workbook import heads_report  # noqa: E402


@pytest.fixture(autouse=True)
def default_target(monkeypatch):
    monkeypatch.delenv("PEAGLE_TARGET", raising=False)


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


def test_the_held_out_row_is_the_heads_last(tmp_path):
    compare = {"rows": [{"path": "heads/p", "n": 1}, {"path": "heads/s", "n": 2}, {"path": "heads/p", "n": 3}]}
    assert heads_report.heldout_row(compare, tmp_path / "heads" / "p", tmp_path)["n"] == 3
    assert heads_report.heldout_row(compare, tmp_path / "heads" / "q", tmp_path) is None


def test_the_heading_counts_prompts_by_kind():
    compare = {"prompts": ["code-1", "code-2", "math-1"], "max_new_tokens": 8, "dtype": "bfloat16", "host": "h"}
    assert heads_report.heldout_heading(compare) == \
        "\nheld-out comparison (3 prompts x 8 tokens: 2 code, 1 math; bfloat16, host h):"


def test_the_comparison_plot_draws_committed_left_and_live_right(shown):
    live = {"parallel": {"acceptance_length": {1: 1.2, 7: 1.5}}, "sequential": {"acceptance_length": {1: 1.3, 7: 2.0}}}
    heads_report.plot_heldout_and_live({"parallel": P, "sequential": None}, live, [1, 7], ("left", "right"))
    (left, left_lines), (right, right_lines) = shown[0]
    assert (left, right) == ("left", "right")
    assert left_lines == [("P-EAGLE (parallel)", [3, 7], [1.8, 1.9])]  # no committed EAGLE-3 row: no line
    assert right_lines[1] == ("EAGLE-3 (sequential)", [1, 7], [1.3, 2.0])


@pytest.mark.parametrize("gap, words", [(0.04, "a tie"), (-0.04, "a tie"), (0.2, "EAGLE-3 ahead"),
                                        (-0.2, "P-EAGLE ahead")])
def test_the_leader_reads_a_gap_against_the_tie(gap, words):
    assert heads_report.leader(gap, 0.05) == words


def test_the_held_out_gap_is_recorded_predicted_at_k1_or_none():
    assert heads_report.held_out_gap(P, S, 7, True) == (pytest.approx(0.6), "held-out K=7")
    assert heads_report.held_out_gap(P, S, 1, True) == (pytest.approx(-0.1), "held-out slot-1 rates (at K=3) predict")
    assert heads_report.held_out_gap(P, S, 5, True) is None
    assert heads_report.held_out_gap(P, S, 7, False) is None


def test_against_held_out_says_same_or_reverse_order():
    assert heads_report.against_heldout(0.3, 7, P, S, 0.05, True) == \
        "; held-out K=7: EAGLE-3 ahead (gap +0.60), the same order"
    assert heads_report.against_heldout(0.3, 1, P, S, 0.05, True).endswith(
        "P-EAGLE ahead (gap -0.10), the reverse order")
    assert heads_report.against_heldout(0.01, 7, P, S, 0.05, True).endswith("(gap +0.60)")  # a live tie: no order
    assert heads_report.against_heldout(0.3, 5, P, S, 0.05, True) == "; no held-out figure at this K"
    assert heads_report.against_heldout(0.3, 7, P, S, 0.05, False) == ""


def test_a_missing_curve_has_no_points(tmp_path):
    assert heads_report.read_curve(tmp_path / "curve.json") == {"points": []}
    (tmp_path / "curve.json").write_text(json.dumps({"points": [{"a": 1}]}))
    assert heads_report.read_curve(tmp_path / "curve.json")["points"] == [{"a": 1}]


def test_the_curve_sources_name_each_panel_with_points(capsys):
    docs = [{"points": [1], "k": 7, "val_prompts": 8, "max_new_tokens": 64, "dtype": "bfloat16"}, {"points": []}]
    heads_report.print_curve_sources(docs, "cpu-x")
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("measured on cpu-x, target dtype bfloat16 in the curve files")
    assert out[1:] == ["left panel: every snapshot scored at K=7 on 8 held-out prompts x 64 new tokens "
                       "(not section 1's prompts)"]


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


def test_the_snapshots_list_each_long_run_and_each_deeper_heads_last(capsys):
    heads_report.print_snapshots(CURVE, DEEPER)
    assert capsys.readouterr().out.splitlines() == [
        "P-EAGLE (p1 to p2, 4x the tokens), AL at each snapshot (thousand tokens seen): 1.100 (1k), 1.400 (4k)",
        "exp-L1: last snapshot at       300 tokens, AL 1.300",
        "exp-L2: last snapshot at       200 tokens, AL 1.250"]


def test_the_run_ends_put_the_deeper_heads_beside_the_shipped_one(capsys):
    record = {"history": [{"head": "x-fresh", "tokens_seen": 5000}]}
    compare = {"rows": [{"path": f"h/peagle-L{n}", "acceptance_length": {"7": 1.0 + n / 10}} for n in (1, 4)]}
    heads_report.print_run_ends(record, compare, P)
    out = capsys.readouterr().out
    assert "ended at 5,000 tokens" in out and "scores 1.100 (exp-L4 1.400 at their runs' end), and 1.900" in out
    heads_report.print_run_ends({"history": []}, compare, P)
    assert capsys.readouterr().out == ""
