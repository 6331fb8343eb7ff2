"""peagle_lab.bench: timings come with their machine, ratios come from one run, broken losslessness is loud."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from conftest import make_tiny_llama
from peagle_lab import bench
from peagle_lab.bench.config import BenchConfig, parse_ks
from peagle_lab.errors import PeagleError

PROMPTS = [[5, 17, 33, 17, 33, 40, 41, 17, 33, 40], [9, 10, 11, 12, 9, 10, 11]]


@pytest.fixture(scope="module")
def target():
    return make_tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=96, max_positions=4096)


@pytest.fixture(scope="module")
def heads(target):
    torch.manual_seed(0)
    return (bench.fresh_head(target, "parallel", mask_token_id=16),
            bench.fresh_head(target, "sequential", mask_token_id=16))


@pytest.fixture(scope="module")
def e2e(target, heads):
    cfg = BenchConfig(ks_parallel=[1, 3], ks_sequential=[2], prompts=PROMPTS, max_new_tokens=10, pld_ks=[3],
                      oracle_ks=[], eos_id=2)
    return bench.end_to_end(target, None, cfg, parallel_head=heads[0], sequential_head=heads[1])


def test_summarize_gives_median_and_interquartile_range():
    s = bench.summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s["median"], s["q1"], s["q3"], s["iqr"], s["n"]) == (3.0, 2.0, 4.0, 2.0, 5)
    assert bench.summarize([])["median"] is None
    assert bench.summarize([0.5])["iqr"] == 0.0


def test_time_repeated_runs_warmup_untimed_then_the_repeats():
    calls = []
    samples = bench.time_repeated(lambda: calls.append(1), "cpu", repeats=4, warmup=2)
    assert len(samples) == 4 and len(calls) == 6 and all(s >= 0 for s in samples)


def test_environment_names_hardware_threads_versions_and_load():
    env = bench.finish_environment(bench.environment("cpu", torch.float32))
    for key in ("cpu", "hardware", "torch_threads", "dtype", "torch", "transformers", "git_commit",
                "loadavg_start", "loadavg_end", "timer", "quiet"):
        assert key in env, key
    assert env["dtype"] == "float32" and env["timer"] == "perf_counter" and env["torch_threads"] >= 1
    assert env["wall_s"] >= 0


def test_the_load_line_warns_only_when_the_load_exceeds_the_usable_cores():
    quiet = bench.load_line({"loadavg_start": [0.5, 0.4, 0.3], "loadavg_end": [1.2, 0.5, 0.3], "cpu_cores_usable": 2})
    assert quiet == "load (1 min) 0.5 -> 1.2 on 2 cores"
    busy = bench.load_line({"loadavg_start": [0.5, 0.4, 0.3], "loadavg_end": [3.5, 1.0, 0.5], "cpu_cores_usable": 2})
    assert busy.startswith("load (1 min) 0.5 -> 3.5 on 2 cores") and "WARNING: load above the cores" in busy
    unknown = bench.load_line({"loadavg_start": [9.0, 1, 1], "loadavg_end": None})  # a run not finished, no core count
    assert unknown == "load (1 min) 9.0 -> ? on ? cores"


def test_drafting_cost_times_both_modes_per_k_and_records_the_environment(target, heads):
    dc = bench.drafting_cost(heads[0], target, BenchConfig(prompts=PROMPTS[:1], draft_ks=[1, 3], draft_repeats=3,
                                                           draft_warmup=1))
    assert [r["k"] for r in dc["rows"]] == [1, 3]
    for r in dc["rows"]:
        assert r["parallel_ms"] > 0 and r["sequential_ms"] > 0 and r["verify_ms"] > 0
        assert r["ratio_seq_over_par"] == pytest.approx(r["sequential_ms"] / r["parallel_ms"], rel=1e-2)
        assert r["sequential_passes"] == r["k"] and r["parallel_passes"] == 1
    assert len(dc["raw_s"]["parallel_k3"]) == 3
    assert dc["env"]["loadavg_end"] is not None and dc["env"]["hardware"]
    assert dc["target_step_ms"] > 0


def test_end_to_end_speedup_is_measured_against_plain_in_the_same_run(e2e):
    methods = {m["method"]: m for m in e2e["methods"]}
    assert set(methods) == {"plain", "p-eagle K=1", "p-eagle K=3", "eagle3 K=2", "hf-greedy", "prompt-lookup K=3"}
    plain = methods["plain"]
    assert plain["speedup"] == 1.0 and plain["acceptance_length"] == 1.0
    for m in methods.values():
        assert m["speedup"] == pytest.approx(m["tokens_per_s"] / plain["tokens_per_s"], rel=1e-3)
    runs = e2e["runs"]
    for row in runs:  # per-prompt speed-up: ratio to plain on the same prompt and repeat
        base = next(x for x in runs if x["method"] == "plain" and x["prompt"] == row["prompt"]
                    and x["repeat"] == row["repeat"])
        assert row["speedup_vs_plain"] == pytest.approx(base["seconds"] / row["seconds"])
    # methods ran interleaved in a rotating order: the plain run is not always first
    assert {x["order"] for x in runs if x["method"] == "plain"} != {0}


def test_end_to_end_reports_acceptance_ideal_speedup_efficiency_and_losslessness(e2e):
    assert e2e["all_lossless"] is True and all(e2e["lossless"].values())
    row = next(m for m in e2e["methods"] if m["method"] == "p-eagle K=3")
    assert 1.0 <= row["acceptance_length"] <= 4.0
    assert len(row["per_position_acceptance"]) == 3
    att = row["per_position_attempts"]  # every round tries slot 1; a deeper slot only after the ones before it
    assert att[0] == row["rounds"] and att == sorted(att, reverse=True)
    accepted = [round(r * a) for r, a in zip(row["per_position_acceptance"], att) if a]
    assert row["acceptance_length"] == pytest.approx(1 + sum(accepted) / row["rounds"], rel=1e-3)
    ideal = row["acceptance_length"] * row["t_step_ms"] / (row["t_draft_round_ms"] + row["t_verify_round_ms"])
    assert row["ideal_speedup"] == pytest.approx(ideal, rel=1e-2)
    assert row["efficiency"] == pytest.approx(row["decode_speedup"] / row["ideal_speedup"], rel=1e-2)
    prof = {p["method"]: p for p in e2e["round_profile"]}
    assert set(prof) == {"p-eagle K=1", "p-eagle K=3", "eagle3 K=2"}
    p = prof["eagle3 K=2"]
    assert p["draft_ms"] > 0 and p["verify_ms"] > 0 and p["accept_rollback_ms"] >= 0
    assert "not run" in e2e["assisted_generation"]
    assert e2e["env"]["hardware"] and e2e["config"]["n_prompts"] == 2


def test_a_method_that_changes_the_output_is_flagged_as_not_lossless(target, heads):
    def broken(prompt, max_new):
        return bench.MethodRun(tokens=[3] * max_new, seconds=0.01)

    bad = bench.Method("broken", "other", None, broken)
    with pytest.warns(UserWarning, match="LOSSLESSNESS BROKEN"):
        cfg = BenchConfig(ks_parallel=[2], prompts=PROMPTS[:1], max_new_tokens=8, pld_ks=[], oracle_ks=[],
                          hf_greedy=False, eos_id=2)
        res = bench.end_to_end(target, None, cfg, parallel_head=heads[0], extra_methods=[bad])
    assert res["all_lossless"] is False and res["lossless"]["broken"] is False
    assert res["lossless"]["p-eagle K=2"] is True
    assert any("LOSSLESSNESS BROKEN" in n for n in res["notes"])
    assert next(m for m in res["methods"] if m["method"] == "broken")["lossless"] is False


def test_write_results_writes_json_csv_and_plots_that_load_back(tmp_path, e2e, target, heads):
    dc = bench.drafting_cost(heads[0], target, BenchConfig(prompts=PROMPTS[:1], draft_ks=[1, 2], draft_repeats=2,
                                                           draft_warmup=0))
    files = bench.write_results({"drafting_cost": dc, "end_to_end": e2e}, tmp_path)
    names = {p.name for p in files.values()}
    assert {"drafting_cost.json", "drafting_cost.csv", "end_to_end.json", "end_to_end.csv", "end_to_end_runs.csv",
            "round_profile.csv", "bench.json", "README.md", "drafting_latency.png", "speedup_vs_k.png",
            "acceptance_length_vs_k.png", "round_profile.png"} <= names
    assert all((tmp_path / n).stat().st_size > 0 for n in names)
    with open(tmp_path / "end_to_end.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["method"] for r in rows} >= {"plain", "p-eagle K=3"}
    assert rows[0]["env_hardware"] and rows[0]["env_torch_threads"] and rows[0]["lossless"] == "True"
    back = bench.load_results(tmp_path)
    assert back["end_to_end"]["methods"] == json.loads(json.dumps(e2e["methods"]))
    assert back["drafting_cost"]["env"]["git_commit"]
    index = json.loads((tmp_path / "bench.json").read_text())
    assert index["headline"]["all_lossless"] is True and "1" in index["headline"]["drafting_ratio_seq_over_par"]
    table = bench.format_table(back["end_to_end"]["methods"], ["method", "speedup", "lossless"])
    assert table.count("\n") == len(e2e["methods"]) + 1


def test_k_lists_parse_ranges_and_reject_nonsense():
    assert parse_ks("1-3,6") == [1, 2, 3, 6]
    assert parse_ks("4,2,2") == [2, 4]
    for bad in ("0-2", "a", ""):
        with pytest.raises(PeagleError):
            parse_ks(bad)


def test_cli_bench_runs_on_a_local_tiny_target_and_writes_results(tmp_path, tiny_llama, byte_tokenizer, capsys):
    from peagle_lab.cli import main

    model = tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=len(byte_tokenizer), max_positions=4096)
    model.config.eos_token_id = byte_tokenizer.eos_token_id
    model.save_pretrained(tmp_path / "target")
    byte_tokenizer.save_pretrained(tmp_path / "target")
    out = tmp_path / "out"
    rc = main(["bench", "--target", str(tmp_path / "target"), "--parallel-head", "fresh", "--sequential-head",
               "fresh", "--quick", "-n", "1", "--max-new-tokens", "6", "--ks-parallel", "1,2", "--ks-sequential", "1",
               "--draft-ks", "1,2", "--draft-repeats", "2", "--pld-ks", "2", "--out", str(out), "--no-plots"])
    assert rc == 0
    assert (out / "end_to_end.csv").exists() and (out / "drafting_cost.json").exists()
    e2e = json.loads((out / "end_to_end.json").read_text())
    assert e2e["config"]["parallel_head"]["source"].startswith("fresh")
    assert e2e["all_lossless"] is True
    assert "results:" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ fresh heads
def _tokenizer_with_free_specials():
    from conftest import make_byte_tokenizer

    tok = make_byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<unused_a>", "<unused_b>"]})
    return tok, tok.convert_tokens_to_ids("<unused_b>")


def test_fresh_heads_take_their_mask_token_from_the_tokenizer(tmp_path):
    from transformers import AutoModelForCausalLM

    from peagle_lab.workbook import explorer
    from peagle_lab.drafter.vocab import mask_token_id_for, pick_mask_token_id

    tok, free = _tokenizer_with_free_specials()
    assert free != 16 and pick_mask_token_id(tok) == free
    model = make_tiny_llama(vocab=len(tok))
    assert bench.fresh_head(model, tokenizer=tok).config.mask_token_id == free
    assert bench.fresh_head(model, mask_token_id=5).config.mask_token_id == 5  # an explicit id still wins
    with pytest.raises(PeagleError, match="tokenizer"):  # a bare model and no tokenizer: nothing to pick from
        bench.fresh_head(model)
    # no tokenizer passed: the one saved beside the model (how the notebooks load the embedded target)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    saved = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert mask_token_id_for(saved) == free
    head, desc = bench.load_head_or_fresh("fresh", saved)
    assert head.config.mask_token_id == free and desc["mask_token_id"] == free
    explorer._HEADS.clear()
    assert explorer.get_head(explorer.FRESH, saved).config.mask_token_id == free


def test_a_seeded_fresh_head_is_the_same_head_and_leaves_the_random_state_alone():
    model = make_tiny_llama(vocab=64)
    torch.manual_seed(1)
    before = torch.random.get_rng_state()
    a, b = bench.fresh_head(model, mask_token_id=3, seed=7), bench.fresh_head(model, mask_token_id=3, seed=7)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    c = bench.fresh_head(model, mask_token_id=3, seed=8)
    assert not all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


def test_an_untrained_head_still_gets_a_mask_token_when_the_tokenizer_has_no_free_one(byte_tokenizer):
    from peagle_lab.drafter.vocab import mask_token_id_for

    n = len(byte_tokenizer)  # its only special tokens are BOS / EOS / PAD: nothing to pick for training
    with pytest.raises(PeagleError, match="No unused special token"):
        mask_token_id_for(make_tiny_llama(vocab=n), byte_tokenizer)
    # an embedding row beyond the tokenizer never occurs in text
    assert bench.fresh_head(make_tiny_llama(vocab=n + 4), tokenizer=byte_tokenizer).config.mask_token_id == n
    with pytest.warns(UserWarning, match="no unused special token"):
        assert bench.fresh_head(make_tiny_llama(vocab=n), tokenizer=byte_tokenizer).config.mask_token_id == n - 1


@pytest.mark.real_model
def test_smollm2s_mask_token_is_still_16():
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from peagle_lab.models import cache_dir, convert_default
    from peagle_lab.drafter.vocab import mask_token_id_for, pick_mask_token_id

    if not (cache_dir() / "SmolLM2-135M-Instruct" / "config.json").exists():
        pytest.skip("the embedded target is not converted here (make setup)")
    path = convert_default()
    tok = AutoTokenizer.from_pretrained(path)
    assert pick_mask_token_id(tok) == 16 and tok.convert_ids_to_tokens(16) == "<empty_output>"
    assert mask_token_id_for(SimpleNamespace(name_or_path=str(path))) == 16


# ------------------------------------------------------------------------------------------ suites
def test_the_chat_suite_takes_held_out_chat_reasoning_and_code_questions_in_turn():
    from peagle_lab.prompts import KINDS, kind_of
    from peagle_lab.prompts import load_scale_records

    recs = bench.chat_records(24)
    val_ids = {r["id"] for r in load_scale_records("val")}
    assert len(recs) == 24 and all(r["id"] in val_ids for r in recs)  # held-out prompts only
    kinds = [kind_of(r["category"]) for r in recs]
    assert kind_of("data") == "reasoning" and kind_of("code_write") == "code"
    assert kinds[:3] == ["chat", "reasoning", "code"] and {kinds.count(k) for k in KINDS} == {8}
    with pytest.raises(PeagleError):
        bench.suite_list("mtbench")
    assert bench.suite_list("all") == ["code", "chat"]


def test_suite_prompts_are_chat_templated_ids_with_their_names(byte_tokenizer):
    from peagle_lab.prompts import chat_ids

    ids, names = bench.suite_prompts(byte_tokenizer, "chat", 3)
    first = bench.chat_records(1)[0]
    assert names[0] == first["id"] and ids[0] == chat_ids(byte_tokenizer, first["prompt"], history=first.get("history"))
    code_ids, code_names = bench.suite_prompts(byte_tokenizer, "code", 2)
    assert code_names == ["HumanEval/0", "HumanEval/1"] and len(code_ids) == 2


def test_results_are_written_and_read_back_per_suite_and_old_files_read_as_code(tmp_path, e2e, target, heads):
    import copy

    chat = copy.deepcopy(e2e)
    chat["config"]["suite"] = "chat"
    code = copy.deepcopy(e2e)
    code["config"]["suite"] = "code"
    files = bench.write_results({"suites": {"code": code, "chat": chat}, "end_to_end": code}, tmp_path)
    names = {p.name for p in files.values()}
    assert {"end_to_end.json", "end_to_end_chat.json", "end_to_end_chat.csv", "end_to_end_chat_runs.csv",
            "round_profile_chat.csv", "speedup_vs_k_chat.png", "speedup_vs_k.png"} <= names
    back = bench.load_results(tmp_path)
    assert set(back["suites"]) == {"code", "chat"} and back["end_to_end"]["config"]["suite"] == "code"
    assert "End to end, chat suite" in (tmp_path / "README.md").read_text()
    rows = bench.hosts_table([{"host": "h", "dtype": "float32", "results": back}])
    assert [r["suite"] for r in rows] == ["code", "chat"]
    old = tmp_path / "old"  # a results folder from before suites: no "suite" anywhere
    legacy = copy.deepcopy(e2e)
    legacy["config"].pop("suite", None)
    bench.write_results({"end_to_end": legacy}, old, plots=False)
    assert {p.name for p in old.iterdir()} >= {"end_to_end.json"}
    assert bench.suite_of(bench.load_results(old)["end_to_end"]) == "code"
    assert list(bench.load_results(old)["suites"]) == ["code"]


def test_cli_bench_runs_both_suites_with_the_oracle_and_refuses_a_bad_rate_first(tmp_path, tiny_llama,
                                                                               byte_tokenizer, capsys):
    from peagle_lab.cli import main

    model = tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=len(byte_tokenizer), max_positions=4096)
    model.config.eos_token_id = byte_tokenizer.eos_token_id
    model.save_pretrained(tmp_path / "target")
    byte_tokenizer.save_pretrained(tmp_path / "target")
    out = tmp_path / "out"
    common = ["bench", "--target", str(tmp_path / "target"), "--parallel-head", "fresh", "--sequential-head", "none",
              "--quick", "-n", "1", "--max-new-tokens", "5", "--ks-parallel", "2", "--skip-drafting", "--pld-ks", "2",
              "--oracle-ks", "2", "--no-plots"]
    assert main(common + ["--suite", "all", "--oracle-accept", "0.5", "--out", str(out)]) == 0
    for stem, suite in (("end_to_end", "code"), ("end_to_end_chat", "chat")):
        e2e = json.loads((out / f"{stem}.json").read_text())
        assert e2e["config"]["suite"] == suite and e2e["all_lossless"] is True
        assert "oracle (acceptance 0.5) K=2" in e2e["config"]["methods"]
    assert "suite chat" in capsys.readouterr().out
    assert main(common + ["--oracle-accept", "1.7", "--out", str(tmp_path / "bad")]) == 2
    assert "oracle-accept" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_one_reading_of_integer_lists_serves_every_flag():
    from peagle_lab.validate import int_list

    assert int_list("2, 15,27", "--taps", "2,15,27") == [2, 15, 27]
    assert int_list("1-3,6", "--eval-ks", "1,2") == [1, 2, 3, 6]
    assert int_list("-1,4", "--x", "1") == [-1, 4]
    assert len(int_list("1-999999999", "--x", "1")) == 4096
    for bad in ("", " , ", "a", "1,x", "1-"):
        with pytest.raises(PeagleError, match=r"--x .* is not a list of integers\. Fix: --x 1\."):
            int_list(bad, "--x", "1")


def test_the_acceptance_plot_says_where_the_k_plus_one_bound_leaves_the_frame():
    import matplotlib

    matplotlib.use("Agg")
    from peagle_lab.bench.plots import plot_acceptance

    rows = [{"family": "p-eagle", "k": k, "acceptance_length": 1.5} for k in (1, 3, 5, 7)]
    env = {"hardware": "cpu", "dtype": "float32", "torch": "x"}
    ax = plot_acceptance({"methods": rows, "config": {"n_prompts": 2, "prompts": "chat"}, "env": env}).axes[0]
    bound = next(line for line in ax.lines if line.get_label().startswith("upper bound"))
    assert ax.get_ylim()[1] == pytest.approx(1.5 * 1.25 + 0.2)  # 2.075: K+1 = 4 is already above it
    assert bound.get_label() == "upper bound K+1 (above the frame from K=3: 4 ... 8)"


def test_break_even_plot_draws_one_line_per_distinct_round_up_to_k_plus_one():
    """Rounds within MERGE_STEPS (0.05) share a line and a legend entry (with their range), others keep their own; the x
    axis runs to K+1 and each line is AL / round."""
    import matplotlib

    matplotlib.use("Agg")
    from peagle_lab.bench.plots import MERGE_STEPS, plot_break_even

    assert MERGE_STEPS == 0.05

    curves = [{"label": "a", "verify_ratio": 1.20, "draft_ratio": 0.06},
              {"label": "b", "verify_ratio": 1.20, "draft_ratio": 0.09,  # 0.03 steps apart: one line
               "style": {"color": "black", "linestyle": "--"}},
              {"label": "c", "verify_ratio": 1.90, "draft_ratio": 0.05}]
    fig = plot_break_even(curves, k=7, mark_al=(3.94, "blog"))
    ax = fig.axes[0]
    lines = [line for line in ax.lines if not line.get_label().startswith("_")]
    labels = [line.get_label() for line in lines]
    assert labels[0] == "round 1.26-1.29 steps, 2 runs on one line:\n  a\n  b"  # one legend line per run
    assert labels[1] == "round 1.95 steps: c" and labels[2] == "blog"
    assert [t.get_text() for t in ax.texts] == ["1.26-1.29 steps (2 runs)", "1.95 steps"]  # each line named at its end
    assert lines[0].get_linestyle() == "--"  # the merged line keeps the style one of its curves asked for
    x, y = lines[1].get_data()
    assert ax.get_xlim() == (1.0, 8.0) and y[-1] == pytest.approx(x[-1] / 1.95)
    apart = plot_break_even(curves, k=7, merge_steps=0).axes[0]  # every curve its own line and legend entry
    assert [line.get_label() for line in apart.lines if not line.get_label().startswith("_")] == [
        "round 1.26 steps: a", "round 1.29 steps: b", "round 1.95 steps: c"]
