"""Benchmark results on disk: JSON + CSV (atomic writes), a README per results folder, the headline numbers
and Markdown tables. Reading back what was written: :func:`load_results`."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from .bench_plots import draw_plots
from .atomic import atomic_write, write_json, write_text
from .errors import PeagleError

SCHEMA = "peagle-lab-bench/1"


# ============================================================================================ files
DRAFT_CSV_COLUMNS = ["k", "parallel_ms", "parallel_iqr_ms", "sequential_ms", "sequential_iqr_ms",
                     "ratio_seq_over_par", "ratio_paired_median", "ratio_paired_iqr", "verify_ms", "verify_iqr_ms",
                     "verify_ratio", "draft_ratio", "parallel_passes", "sequential_passes"]
FASTPATH_CSV_COLUMNS = ["case", "what", "before_ms", "after_ms", "speedup"]
E2E_CSV_COLUMNS = ["method", "family", "k", "runs", "new_tokens", "seconds", "tokens_per_s", "speedup",
                   "speedup_median_per_prompt", "speedup_iqr", "speedup_vs_hf_greedy", "decode_speedup",
                   "acceptance_length",
                   "per_position_acceptance", "rounds", "t_step_ms", "t_draft_round_ms", "t_verify_round_ms",
                   "ideal_speedup", "efficiency", "lossless", "identical_to_plain", "lossless_regime",
                   "divergences", "max_divergence_margin", "lossless_note"]
RUNS_CSV_COLUMNS = ["repeat", "prompt", "method", "family", "k", "order", "prompt_tokens", "new_tokens", "seconds",
                    "tokens_per_s", "speedup_vs_plain", "identical_to_plain", "reference", "identical_to_reference",
                    "rounds", "target_forwards",
                    "acceptance_length"]
PROFILE_CSV_COLUMNS = ["method", "family", "k", "draft_ms", "verify_ms", "accept_rollback_ms", "python_overhead_ms",
                       "round_ms", "draft_share", "verify_share", "accept_rollback_share", "python_overhead_share",
                       "prefill_ms_median"]
ENV_CSV_KEYS = ["host", "hardware", "device", "torch_threads", "dtype", "torch", "transformers", "git_commit",
                "loadavg_start", "loadavg_end"]


def json_safe(obj):
    """JSON-safe: NaN/inf -> None, tuples -> lists, tensors -> lists."""
    if isinstance(obj, float):
        return None if (math.isnan(obj) or math.isinf(obj)) else obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "tolist"):
        return json_safe(obj.tolist())
    return obj


def _write_json(path: Path, obj) -> None:
    write_json(path, json_safe(obj), indent=1, allow_nan=False)


def _cell(v):
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return " ".join("" if x is None else (f"{x:.4g}" if isinstance(x, float) else str(x)) for x in v)
    return "" if v is None else str(v)


def _write_csv(path: Path, rows: list[dict], columns: list[str], env: dict | None = None) -> None:
    """CSV with the given columns; the environment is appended as constant columns on every row."""
    env_cols = [f"env_{k}" for k in ENV_CSV_KEYS] if env else []

    def write(tmp):
        with open(tmp, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(columns + env_cols)
            for row in rows:
                w.writerow([_cell(row.get(c)) for c in columns] + [_cell(env.get(k)) for k in ENV_CSV_KEYS] if env
                           else [_cell(row.get(c)) for c in columns])

    atomic_write(path, write)


def write_results(results: dict, out_dir, plots: bool = True, command: str | None = None) -> dict[str, Path]:
    """Write ``{"drafting_cost": ..., "end_to_end": ...}`` (either may be missing) as JSON + CSV (+ PNG plots)
    and a README.md (command, hardware, tables) into ``out_dir``; returns ``{name: path}`` of what was written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    dc, e2e = results.get("drafting_cost"), results.get("end_to_end")
    if dc:
        files["drafting_cost.json"] = out / "drafting_cost.json"
        _write_json(files["drafting_cost.json"], dc)
        files["drafting_cost.csv"] = out / "drafting_cost.csv"
        _write_csv(files["drafting_cost.csv"], dc["rows"], DRAFT_CSV_COLUMNS, dc["env"])
    ab = results.get("fastpath_ab")
    if ab:
        files["fastpath_ab.json"] = out / "fastpath_ab.json"
        _write_json(files["fastpath_ab.json"], ab)
        files["fastpath_ab.csv"] = out / "fastpath_ab.csv"
        _write_csv(files["fastpath_ab.csv"], ab["rows"], FASTPATH_CSV_COLUMNS, ab["env"])
    if e2e:
        files["end_to_end.json"] = out / "end_to_end.json"
        _write_json(files["end_to_end.json"], e2e)
        files["end_to_end.csv"] = out / "end_to_end.csv"
        _write_csv(files["end_to_end.csv"], e2e["methods"], E2E_CSV_COLUMNS, e2e["env"])
        files["end_to_end_runs.csv"] = out / "end_to_end_runs.csv"
        runs = [x | {"acceptance_length": (x["stats"] or {}).get("acceptance_length")} for x in e2e["runs"]]
        _write_csv(files["end_to_end_runs.csv"], runs, RUNS_CSV_COLUMNS, e2e["env"])
        files["round_profile.csv"] = out / "round_profile.csv"
        _write_csv(files["round_profile.csv"], e2e["round_profile"], PROFILE_CSV_COLUMNS, e2e["env"])
    if plots:
        files |= draw_plots(results, out)
    index = {"schema": SCHEMA, "files": sorted(p.name for p in files.values()),
             "env": (e2e or dc or {}).get("env"), "headline": headline(results)}
    files["bench.json"] = out / "bench.json"
    _write_json(files["bench.json"], index)
    files["README.md"] = out / "README.md"
    write_text(files["README.md"], results_readme(results, command))
    return files


def results_readme(results: dict, command: str | None = None) -> str:
    """A short Markdown page for a results folder: command, hardware, the tables, the file list."""
    dc, e2e = results.get("drafting_cost"), results.get("end_to_end")
    env = (e2e or dc)["env"]
    lines = ["# Benchmark results", ""]
    if command:
        lines += ["Made with:", "", "```bash", command, "```", ""]
    lines += [f"- hardware: {env['hardware']}; device {env['device']}; timer {env['timer']}",
              f"- dtype {env['dtype']}; torch {env['torch']}; transformers {env['transformers']}; "
              f"python {env['python']}; git commit {env['git_commit']}",
              f"- load average at start {env['loadavg_start']}, at end {env['loadavg_end']}; "
              f"OMP_WAIT_POLICY={env.get('omp_wait_policy')}; run started {env['timestamp_utc']}"
              + "".join(f"; {name} took {r['env']['wall_s']} s" for name, r in (("drafting cost", dc),
                        ("end to end", e2e)) if r and r["env"].get("wall_s") is not None), ""]
    if dc:
        c = dc["config"]
        lines += ["## Drafting cost per round (median ms; ratio = sequential / parallel)", "",
                  f"Head: {c['head']['source']} ({c['head']['num_hidden_layers']} layer(s), draft vocabulary "
                  f"{c['head']['draft_vocab_size']}); prompt {c['prompt_tokens']} tokens, {c['new_slots']} new context "
                  f"slots per round, {c['repeats']} interleaved repeats. One target decode step: "
                  f"{dc.get('target_step_ms')} ms.", "",
                  format_table(dc["rows"], ["k", "parallel_ms", "parallel_iqr_ms", "sequential_ms", "sequential_iqr_ms",
                                            "ratio_seq_over_par", "verify_ms", "verify_ratio"]), "",
                  "verify_ratio = verifying K+1 tokens in one target pass / one decode step.", ""]
    ab = results.get("fastpath_ab")
    if ab:
        lines += ["## Fast-path cuts, before / after (median ms, interleaved)", "",
                  format_table(ab["rows"], ["case", "what", "before_ms", "after_ms", "speedup"]), ""]
    if e2e:
        c = e2e["config"]
        ph, sh = c.get("parallel_head") or {}, c.get("sequential_head") or {}
        lines += ["## End to end (greedy, batch 1)", "",
                  f"{c['n_prompts']} HumanEval prompts ({min(c['prompt_tokens'])}-{max(c['prompt_tokens'])} tokens), "
                  f"{c['max_new_tokens']} new tokens, {c['repeats']} repeat(s), methods interleaved per prompt. "
                  f"P-EAGLE head: {ph.get('source')}; EAGLE-3 head: {sh.get('source')}. "
                  "speedup = tokens/s ratio to plain greedy in the same run (prefill included); decode_speedup = "
                  "the same after the prefill; ideal = AL x t_step / (t_draft + t_verify); efficiency = "
                  "decode_speedup / ideal.", "",
                    format_table(e2e["methods"], ["method", "tokens_per_s", "speedup", "speedup_iqr", "acceptance_length",
                                                "decode_speedup", "ideal_speedup", "efficiency", "lossless_note"]), "",
                  f"Lossless ({e2e.get('lossless_regime', 'exact')} regime: "
                  + ("token for token" if e2e.get("lossless_regime", "exact") == "exact" else
                     f"every divergence at a plain-run margin within {e2e.get('bf16_tie_ulps')} bf16 ulps of the top "
                     "logit") + f"): **{e2e['all_lossless']}**. "
                  f"Assisted generation: {e2e['assisted_generation']}", ""]
        if e2e.get("round_profile"):
            lines += ["### One round, split (median ms)", "",
                      format_table(e2e["round_profile"], ["method", "draft_ms", "verify_ms", "accept_rollback_ms",
                                                          "python_overhead_ms", "round_ms", "draft_share"]), ""]
        for note in e2e.get("notes", []):
            lines.append(f"- note: {note}")
    lines += ["", "Files: `drafting_cost.{json,csv}`, `end_to_end.{json,csv}`, `end_to_end_runs.csv` (per prompt), "
              "`round_profile.csv`, `fastpath_ab.{json,csv}`, `bench.json` (headline), PNG plots. Every JSON carries the full environment "
              "record; every CSV row carries its key fields.", ""]
    return "\n".join(lines)


def load_results(out_dir) -> dict:
    """Read back what :func:`write_results` wrote (``{}`` when the folder has no results)."""
    out = Path(out_dir)
    got = {}
    for kind in ("drafting_cost", "fastpath_ab", "end_to_end"):
        p = out / f"{kind}.json"
        if p.exists():
            try:
                got[kind] = json.loads(p.read_text())
            except json.JSONDecodeError as exc:
                raise PeagleError(f"{p} is not valid JSON ({exc}). Fix: rerun `peagle-lab bench`.") from exc
    return got


def committed_results(root) -> list[dict]:
    """Every results folder under ``root`` (``<host>/`` or ``<host>/<dtype>/``, each with a ``bench.json``):
    ``[{"host", "dtype", "dir", "results"}]`` sorted by host and dtype. Folders from before hosts were recorded
    are named by their folder."""
    root = Path(root)
    found = []
    for index in sorted(root.glob("*/bench.json")) + sorted(root.glob("*/*/bench.json")):
        res = load_results(index.parent)
        if not res:
            continue
        env = (res.get("end_to_end") or res.get("drafting_cost") or {}).get("env", {})
        host = env.get("host") or index.parent.relative_to(root).parts[0]
        found.append({"host": host, "dtype": env.get("dtype"), "dir": index.parent.relative_to(root).as_posix(),
                      "results": res})
    return sorted(found, key=lambda c: (c["host"], str(c["dtype"])))


def verify_and_draft_ratio(dc: dict, k: int):
    """``(verify(K+1), parallel draft round)`` in units of one target decode step, from a drafting-cost result
    (computed from the medians where an older result lacks the columns); ``(None, None)`` without the data."""
    row = next((r for r in dc.get("rows", []) if r["k"] == k), None)
    step = dc.get("target_step_ms")
    if not row or not step or row.get("verify_ms") is None:
        return None, None
    vr = row.get("verify_ratio") or round(row["verify_ms"] / step, 3)
    dr = row.get("draft_ratio") or round(row["parallel_ms"] / step, 3)
    return vr, dr


def _best(e2e: dict, family: str):
    rows = [m for m in e2e.get("methods", []) if m["family"] == family and m.get("speedup") is not None]
    if not rows:
        return None
    m = max(rows, key=lambda r: r["speedup"])
    k = f"K={m['k']}, " if m.get("k") else ""
    return f"{m['speedup']:.2f}x ({k}AL {m['acceptance_length']:.2f})"


def hosts_table(committed: list[dict]) -> list[dict]:
    """One row per committed host/dtype: verify cost at K=7 and the best end-to-end speed-up of each family."""
    rows = []
    for c in committed:
        res = c["results"]
        dc, e2e = res.get("drafting_cost") or {}, res.get("end_to_end") or {}
        env = (e2e or dc).get("env", {})
        load = env.get("loadavg_start")
        regime = e2e.get("lossless_regime", "exact")
        rows.append({"host": c["host"], "dtype": c["dtype"], "cpu": env.get("gpu") or env.get("cpu"),
                     "threads": env.get("torch_threads"), "load": load[0] if load else None,
                     "verify_ratio_k7": verify_and_draft_ratio(dc, 7)[0], "best_p_eagle": _best(e2e, "p-eagle"),
                     "best_eagle3": _best(e2e, "eagle3"), "prompt_lookup": _best(e2e, "prompt-lookup"),
                     "lossless": f"{e2e.get('all_lossless')} ({regime})" if e2e else None})
    return rows


def headline(results: dict) -> dict:
    """The key numbers: drafting ratio per K, best speed-up per family, losslessness."""
    h = {}
    dc, e2e = results.get("drafting_cost"), results.get("end_to_end")
    if dc:
        h["drafting_ratio_seq_over_par"] = {str(r["k"]): r["ratio_seq_over_par"] for r in dc["rows"]}
    if e2e:
        best = {}
        for row in e2e["methods"]:
            f = row["family"]
            if f != "plain" and (f not in best or (row["speedup"] or 0) > (best[f]["speedup"] or 0)):
                best[f] = row
        h["best"] = {f: {"method": r["method"], "speedup": r["speedup"], "acceptance_length": r["acceptance_length"],
                         "efficiency": r.get("efficiency")} for f, r in best.items()}
        h["plain_tokens_per_s"] = next(r["tokens_per_s"] for r in e2e["methods"] if r["family"] == "plain")
        h["all_lossless"] = e2e["all_lossless"]
    return h


def format_table(rows: list[dict], columns: list[str], floatfmt: str = ".3g") -> str:
    """A Markdown table (no pandas needed)."""
    def fmt(v):
        if isinstance(v, bool):
            return str(v)
        if isinstance(v, float):
            return format(v, floatfmt)
        if isinstance(v, (list, tuple)):
            return " / ".join("-" if x is None else format(x, ".2f") for x in v)
        return "-" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
