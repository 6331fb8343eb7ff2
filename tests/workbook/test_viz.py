"""Token provenance, the HTML renderers, the figures and the explorer's loop (tiny random target, no widgets)."""

from __future__ import annotations

import math
import sys

import pytest

from peagle_lab.workbook import viz
from peagle_lab.errors import PeagleError


# ------------------------------------------------------------------------------------------ provenance
def test_each_round_commits_its_accepted_slots_then_the_target_bonus():
    assert viz.token_sources([2, 0, 3]) == [0, 1, 2, 0, 0, 1, 2, 3, 0]


def test_first_token_comes_from_the_target_even_with_no_round():
    assert viz.token_sources([]) == [0]


def test_sources_are_cut_to_the_returned_output_length():
    assert viz.token_sources([3, 3], n_tokens=6) == [0, 1, 2, 3, 0, 1]


def test_more_tokens_than_the_rounds_account_for_is_an_error():
    with pytest.raises(PeagleError, match="every round"):
        viz.token_sources([1], n_tokens=4)


def test_negative_accepted_count_is_rejected():
    with pytest.raises(PeagleError):
        viz.round_sources(-1)


def test_sources_match_what_the_loop_commits_with_an_oracle_drafter(tiny_llama, random_ids):
    """Every oracle draft is accepted: rounds look like slot 1..K then the bonus token."""
    from peagle_lab.decoding.draft_sources import OracleDrafter
    from peagle_lab.decoding.speculative import iter_rounds, plain_generate
    from peagle_lab.decoding.target_runner import TargetRunner

    model = tiny_llama(vocab=96)
    prompt = random_ids(length=6, vocab=96)[0].tolist()
    runner = TargetRunner(model)
    ref = plain_generate(runner, prompt, 11).tokens
    rounds = list(iter_rounds(runner, OracleDrafter(prompt + ref, 96), prompt, k=3, max_new_tokens=11))
    tokens = [t for r in rounds for t in r.tokens]
    assert tokens == ref
    accepted = [r.accepted for r in rounds if not r.is_prefill]
    assert viz.token_sources(accepted, len(tokens)) == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2]


# ------------------------------------------------------------------------------------------ text pieces
def test_pieces_join_to_the_decoded_text(byte_tokenizer):
    text = "déf f(x):\n    return 'π ≈ 3.14' # 🙂"
    ids = byte_tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = viz.token_pieces(byte_tokenizer.decode, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == byte_tokenizer.decode(ids) == text


def test_a_character_split_over_tokens_goes_to_the_token_that_completes_it(byte_tokenizer):
    ids = byte_tokenizer("aé", add_special_tokens=False)["input_ids"]  # 'é' is two bytes = two tokens
    assert viz.token_pieces(byte_tokenizer.decode, ids) == ["a", "", "é"]


def test_an_unfinished_character_at_the_end_is_kept(byte_tokenizer):
    ids = byte_tokenizer("aé", add_special_tokens=False)["input_ids"][:-1]
    pieces = viz.token_pieces(byte_tokenizer.decode, ids)
    assert "".join(pieces) == byte_tokenizer.decode(ids)


# ------------------------------------------------------------------------------------------ HTML
def test_tokens_html_colours_each_token_by_source_and_escapes_text():
    out = viz.tokens_html(["<a>", " b", "\n"], [0, 1, 2], k=3)
    assert out.count('class="peagle-tok') == 3
    assert "&lt;a&gt;" in out and "<a>" not in out
    assert f"background:{viz.TARGET_COLOUR}" in out and f"background:{viz.SLOT_COLOURS[1]}" in out
    assert "slot 3" in out and "target (bonus)" in out  # legend


def test_tokens_html_needs_one_source_per_piece():
    with pytest.raises(PeagleError, match="align"):
        viz.tokens_html(["a", "b"], [0])


def test_slot_colours_differ_and_cycle_after_ten():
    assert len({viz.slot_colour(j) for j in range(0, 11)}) == 11
    assert viz.slot_colour(11) == viz.slot_colour(1)


def test_bars_say_when_a_slot_was_never_reached():
    out = viz.acceptance_bars_html([0.5, float("nan")], [4, 0])
    assert "50% (2/4 rounds)" in out and "not reached" in out


# ------------------------------------------------------------------------------------------ figures
@pytest.fixture
def agg():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


def test_save_figure_writes_png_under_results(agg, tmp_path, monkeypatch):
    monkeypatch.setenv("PEAGLE_RESULTS", str(tmp_path / "res"))
    fig = viz.plot_per_position_acceptance([0.8, 0.5, float("nan")], title="t")
    path = viz.save_figure(fig, "demo")
    assert path == tmp_path / "res" / "figures" / "demo.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_save_figure_keeps_an_absolute_path_and_suffix(agg, tmp_path):
    fig = viz.plot_acceptance_vs_k({"parallel": {1: 1.5, 2: 1.9}, "sequential": {1: 1.6, 2: 2.1}})
    assert viz.save_figure(fig, tmp_path / "a.svg") == tmp_path / "a.svg"
    assert (tmp_path / "a.svg").read_text().lstrip().startswith("<?xml")


def test_a_slot_no_round_reached_is_labelled_not_drawn_as_zero(agg):
    fig = viz.plot_per_position_acceptance([0.8, 0.0, float("nan")])
    labels = [(t.get_text(), round(t.get_position()[0])) for t in fig.axes[0].texts]
    assert labels == [("not reached", 3)]  # slot 2's rate of 0 is a bar of height 0, with no label


def test_each_bar_carries_its_sample_when_counts_are_given(agg):
    fig = viz.plot_per_position_acceptance({"a": [0.5, 1.0], "b": [0.9, float("nan")]},
                                           counts={"a": [(1, 2), (1, 1)], "b": [(9, 10), (0, 0)]})
    texts = sorted(t.get_text() for t in fig.axes[0].texts)
    assert texts == ["1/1", "1/2", "9/10", "not reached"]  # an unreached slot gets no count


def test_each_counted_bar_draws_its_rate_interval(agg):
    fig = viz.plot_per_position_acceptance([1 / 3, 0.5], counts=[(15, 45), (1, 2)])
    ax = fig.axes[0]
    spans = [seg[:, 1].tolist() for c in ax.collections for seg in c.get_segments()]  # each whisker: (low, high)
    assert spans == [pytest.approx([0.2136, 0.4793], abs=1e-3), pytest.approx([0.0945, 0.9055], abs=1e-3)]
    assert [round(t.get_position()[1], 3) for t in ax.texts] == [round(0.4793 + 0.01, 3), round(0.9055 + 0.01, 3)]


def test_a_slot_always_or_never_accepted_draws_its_interval_to_the_edge(agg):
    # 6 of 6 and 0 of 11 are where the score interval's arithmetic lands a hair inside [0, 1]: no negative whisker
    fig = viz.plot_per_position_acceptance([1.0, 0.0, 1 / 3], counts=[(6, 6), (0, 11), (1, 3)])
    spans = [seg[:, 1].tolist() for c in fig.axes[0].collections for seg in c.get_segments()]
    assert spans[0][1] == 1.0 and spans[1][0] == 0.0


def test_grouped_bars_draw_one_series_per_label(agg):
    fig = viz.plot_per_position_acceptance({"parallel": [0.6, 0.4], "sequential": [0.7, 0.5]})
    assert len(fig.axes[0].patches) == 4


# ------------------------------------------------------------------------------------------ explorer
def test_explorer_without_ipywidgets_names_the_install_command(monkeypatch):
    from peagle_lab.workbook import explorer

    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import fails
    with pytest.raises(ImportError, match="pip install ipywidgets"):
        explorer.explorer()


def test_run_generation_accounts_for_every_token_and_is_lossless(tiny_llama, byte_tokenizer):
    from peagle_lab.drafter.heads import fresh_head
    from peagle_lab.workbook.explorer import GenerationSettings, run_generation

    model = tiny_llama(vocab=len(byte_tokenizer), hidden=32, layers=4)
    head = fresh_head(model, mask_token_id=16)
    updates = []
    run = run_generation(model, byte_tokenizer, head, GenerationSettings("hi", k=3, mode="parallel", max_new_tokens=10),
                         on_update=lambda r: updates.append((len(r.tokens), r.done)))
    assert len(run.sources) == len(run.tokens) == len(run.plain_tokens)
    assert run.lossless is True
    assert run.sources[0] == viz.TARGET
    assert run.sources.count(viz.TARGET) == min(run.stats.rounds + 1, len(run.tokens))
    assert updates[-1] == (len(run.tokens), True) and len(updates) == run.stats.rounds + 1
    assert math.isfinite(run.stats.acceptance_length) and run.seconds > 0
    assert "acceptance length" in run.summary()


def test_sequential_mode_with_sampling_runs(tiny_llama, byte_tokenizer):
    from peagle_lab.drafter.heads import fresh_head
    from peagle_lab.workbook.explorer import GenerationSettings, run_generation

    model = tiny_llama(vocab=len(byte_tokenizer))
    settings = GenerationSettings("hi", k=2, mode="sequential", temperature=0.8, max_new_tokens=6, baseline=False)
    run = run_generation(model, byte_tokenizer, fresh_head(model, mask_token_id=16), settings)
    assert len(run.tokens) == len(run.sources) and run.lossless is None


def test_the_explorer_names_the_target_it_runs_and_why_it_has_no_head(tiny_llama, tmp_path):
    from peagle_lab.models import DEFAULT_TARGET
    from peagle_lab.workbook.explorer import target_words

    other = tiny_llama()
    other.name_or_path = "Qwen/Qwen3-0.6B"
    name, missing = target_words(other)
    assert "Qwen3-0.6B" in name and "embedded" not in name
    assert "No trained head for <code>Qwen3-0.6B</code>" in missing and "shipped" in missing
    default = tiny_llama()
    default.name_or_path = DEFAULT_TARGET
    name, missing = target_words(default)
    assert "embedded target" in name and missing.startswith("No shipped head")


def test_a_static_copy_of_the_explorer_says_what_it_is_instead_of_the_widget_repr(tiny_llama, byte_tokenizer):
    pytest.importorskip("ipywidgets")
    from peagle_lab.workbook.explorer import explorer

    ex = explorer(tiny_llama(vocab=len(byte_tokenizer)), byte_tokenizer, k=2, max_new_tokens=4)
    bundle = ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "explorer widget" in bundle["text/plain"] and "VBox" not in bundle["text/plain"]


def test_the_payoff_figure_draws_each_run_apart_and_the_round_from_its_timings(agg):
    def row(family, k, speedup, al, draft, verify=100.0, step=50.0):
        return {"family": family, "k": k, "speedup": speedup, "acceptance_length": al, "t_draft_round_ms": draft,
                "t_verify_round_ms": verify, "t_step_ms": step}

    runs = {"first": [row("p-eagle", 3, 1.4, 3.0, 10), row("p-eagle", 7, 2.0, 4.5, 10), row("plain", None, 1, 1, 0)],
            "wider": [row("p-eagle", 7, 2.1, 4.5, 12), row("eagle3", 7, 1.9, 5.0, 50)]}
    fig = viz.plot_payoff_vs_k(runs, {"p-eagle": "P-EAGLE", "eagle3": "EAGLE-3"})
    speed, _, rounds = fig.axes
    lines = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in rounds.get_lines()}
    assert lines["P-EAGLE, first"] == ([3, 7], [2.2, 2.2])  # (10 + 100) / 50 at both K: no plain row drawn
    assert lines["P-EAGLE, wider"] == ([7], [2.24]) and lines["EAGLE-3, wider"] == ([7], [3.0])
    assert "EAGLE-3, first" not in lines  # a family a run lacks draws nothing
    assert sum(ln.get_label().startswith("P-EAGLE") for ln in speed.get_lines()) == 2  # two runs, never joined


def test_the_ledger_draws_a_panel_per_head_with_its_rows_in_order_hollow_where_live():
    pytest.importorskip("matplotlib")
    base = dict(host="h", prompts=8, new_tokens=32, k=7, rounds=10)
    rows = [dict(base, head="P", chapter="05", what="comparison (committed)", prompt_set="code: HumanEval",
                 dtype="float32", acceptance_length=1.9),
            dict(base, head="P", chapter="05", what="live K sweep", prompt_set="HumanEval", dtype="bfloat16",
                 acceptance_length=1.4),
            dict(base, head="P", chapter="10", what="template", prompt_set="held-out split", dtype="float32", k=3,
                 acceptance_length=1.0),
            dict(base, head="P", chapter="00", what="hand-written round", prompt_set="one code request", prompts=1,
                 dtype="float32", acceptance_length=1.2),
            dict(base, head="E", chapter="05", what="comparison (committed)", prompt_set="code: HumanEval",
                 dtype="float32", acceptance_length=2.5),
            dict(base, head="E", chapter="07", what="live", prompt_set="held-out split", dtype="float32",
                 acceptance_length=1.3),
            dict(base, head="lonely", chapter="06", what="live", prompt_set="lists", dtype="float32",
                 acceptance_length=5.0)]
    fig = viz.plot_ledger(rows)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["P", "E"]  # a head with one row gets no panel
    labels = [t.get_text() for t in panels[0].get_yticklabels()]
    assert labels == ["10  K=3  8x32  fp32", "00  K=7  1x32  fp32", "05  K=7  8x32  bf16",
                      "05  K=7  8x32  fp32"]  # lowest AL first
    dots = [c.get_offsets().tolist()[0] for c in panels[0].collections]
    assert dots == [[1.0, 0.0], [1.2, 1.0], [1.4, 2.0], [1.9, 3.0]]
    hollow = [c.get_facecolors()[0][3] == 0 if len(c.get_facecolors()) else True for c in panels[0].collections]
    assert hollow == [True, True, True, False]  # rows not marked committed are live: hollow
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    # a colour per prompt set (suite name dropped), every one-prompt row under one colour
    assert legend == ["HumanEval", "a single prompt", "held-out split", "live (hollow)"]


def test_ledger_rows_that_would_read_alike_carry_what_tells_them_apart():
    pytest.importorskip("matplotlib")
    base = dict(head="P", chapter="10", host="h", prompt_set="held-out split", prompts=2, new_tokens=40, k=4,
                dtype="float32", rounds=10)
    rows = [dict(base, what="template: chat template (as trained)", acceptance_length=1.5),
            dict(base, what="template: no template (bare text)", acceptance_length=1.0),
            dict(base, what="vLLM serving sweep, 4 concurrent (committed)", k=7, acceptance_length=1.3)]
    labels = [t.get_text() for t in viz.plot_ledger(rows).axes[0].get_yticklabels()]
    assert labels == ["10  K=4  2x40  fp32  bare text", "10  K=7  2x40  fp32", "10  K=4  2x40  fp32  as trained"]
    assert viz.ledger_tag({"what": "vLLM serving sweep, 16 concurrent (committed)"}) == "16 concurrent"
    assert viz.ledger_tag({"what": "bench `chat` suite, h/float32 (committed), best speed-up"}) == "chat suite"
    assert viz.ledger_tag({"what": "vLLM server, one chat request"}) == "vLLM server, one chat"  # whole words
