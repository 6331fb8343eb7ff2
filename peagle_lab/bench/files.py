"""Benchmark results on disk: JSON + CSV (atomic writes), the PNG plots and a README per results folder, an
index with the headline; one set of end-to-end files per suite (:func:`e2e_stem`: ``end_to_end.*`` holds the
``code`` suite, also the name of results that record no suite, ``end_to_end_chat.*`` the ``chat`` suite); reading them
back (:func:`load_results`, :func:`committed_results`: every host's committed folder), and the rule that one host's or one dtype's results never overwrite another's."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from ..atomic import atomic_write, write_json, write_text
from ..decoding.divergence import lossless_regime
from ..errors import PeagleError
from ..precision import dtype_name, host_slug, resolve_dtype
from .plots import draw_plots
from .readme import results_readme
from ..jsonsafe import json_safe
from .record import SCHEMA
from .suites import DEFAULT_SUITE, SUITES, suite_of
from .summary import headline


def e2e_stem(suite: str) -> str:
    """File stem of a suite's end-to-end results: ``end_to_end`` (code) or ``end_to_end_<suite>``."""
    return "end_to_end" if suite == DEFAULT_SUITE else f"end_to_end_{suite}"


def result_suites(results: dict) -> dict:
    """``{suite: end-to-end result}`` of a results dict (``results["suites"]``, or its one ``end_to_end``); a result
    written before its lossless regime was recorded gets the regime of its dtype and device."""
    suites = results.get("suites")
    if not suites:
        e2e = results.get("end_to_end")
        suites = {suite_of(e2e): e2e} if e2e else {}
    for e2e in suites.values():
        if "lossless_regime" not in e2e:
            env = e2e.get("env") or {}
            device = env.get("device") or "cpu"
            dtype = resolve_dtype(env.get("dtype") or "float32", device, warn=False)
            e2e["lossless_regime"] = lossless_regime(dtype, device)
    return suites


DRAFT_CSV_COLUMNS = ["k", "parallel_ms", "parallel_iqr_ms", "sequential_ms", "sequential_iqr_ms",
                     "ratio_seq_over_par", "ratio_paired_median", "ratio_paired_iqr", "verify_ms", "verify_iqr_ms",
                     "verify_ratio", "draft_ratio", "parallel_passes", "sequential_passes"]
E2E_CSV_COLUMNS = ["method", "family", "k", "runs", "new_tokens", "seconds", "tokens_per_s", "speedup",
                   "speedup_median_per_prompt", "speedup_iqr", "speedup_vs_hf_greedy", "decode_speedup",
                   "acceptance_length",
                   "per_position_acceptance", "per_position_attempts", "rounds", "t_step_ms", "t_draft_round_ms",
                   "t_verify_round_ms",
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
    suites = result_suites(results)
    for suite, one in suites.items():
        stem = e2e_stem(suite)
        suffix = stem[len("end_to_end"):]
        files[f"{stem}.json"] = out / f"{stem}.json"
        _write_json(files[f"{stem}.json"], one)
        files[f"{stem}.csv"] = out / f"{stem}.csv"
        _write_csv(files[f"{stem}.csv"], one["methods"], E2E_CSV_COLUMNS, one["env"])
        files[f"{stem}_runs.csv"] = out / f"{stem}_runs.csv"
        runs = [x | {"acceptance_length": (x["stats"] or {}).get("acceptance_length")} for x in one["runs"]]
        _write_csv(files[f"{stem}_runs.csv"], runs, RUNS_CSV_COLUMNS, one["env"])
        files[f"round_profile{suffix}.csv"] = out / f"round_profile{suffix}.csv"
        _write_csv(files[f"round_profile{suffix}.csv"], one["round_profile"], PROFILE_CSV_COLUMNS, one["env"])
    if plots:  # the break-even picture takes its head points from results["end_to_end"]
        main = suite_of(e2e) if e2e else None
        files |= draw_plots(results, out, suffix=e2e_stem(main)[len("end_to_end"):] if main else "")
        for suite, one in suites.items():
            if suite != main:
                files |= draw_plots({"end_to_end": one}, out, suffix=e2e_stem(suite)[len("end_to_end"):])
    index = {"schema": SCHEMA, "files": sorted(p.name for p in files.values()),
             "env": (e2e or dc or {}).get("env"), "headline": headline(results)}
    files["bench.json"] = out / "bench.json"
    _write_json(files["bench.json"], index)
    files["README.md"] = out / "README.md"
    write_text(files["README.md"], results_readme(results, command))
    return files


def load_results(out_dir) -> dict:
    """Read back what :func:`write_results` wrote (``{}`` when the folder has no results): ``drafting_cost``,
    ``suites`` (``{suite: end-to-end result}``) and ``end_to_end`` (the code suite's, else the
    first suite's)."""
    out = Path(out_dir)
    got = {}
    for kind in ("drafting_cost",) + tuple(e2e_stem(s) for s in SUITES):
        p = out / f"{kind}.json"
        if p.exists():
            try:
                got[kind] = json.loads(p.read_text())
            except json.JSONDecodeError as exc:
                raise PeagleError(f"{p} is not valid JSON ({exc}). Fix: rerun `peagle-lab bench`.") from exc
    suites = {suite_of(got[e2e_stem(s)]): got.pop(e2e_stem(s)) for s in SUITES if e2e_stem(s) in got}
    if suites:
        got["suites"] = suites
        got["end_to_end"] = suites.get(DEFAULT_SUITE) or next(iter(suites.values()))
    return got


def committed_results(root) -> list[dict]:
    """Every results folder under ``root`` (``<host>/`` or ``<host>/<dtype>/``, each with a ``bench.json``):
    ``[{"host", "dtype", "dir", "results"}]`` sorted by host and dtype. A folder whose results name no host is
    named by its folder."""
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


def check_results_dir(out_dir, device, dtype, overwrite: bool = False) -> None:
    """Refuse to write into a results folder that holds another host's or another dtype's results (or, without
    ``overwrite``, any earlier results): each host keeps its own ``data/results/<host-slug>/``."""
    index = Path(out_dir) / "bench.json"
    if not index.exists():
        return
    try:
        env = json.loads(index.read_text()).get("env") or {}
    except ValueError:
        env = {}
    mine, theirs = host_slug(device), env.get("host")
    if theirs and theirs != mine:
        raise PeagleError(f"{out_dir} holds results of host {theirs}, this is {mine}: results of one host never "
                          f"overwrite another's. Fix: --out data/results/{mine}/{dtype_name(dtype)}.")
    if env.get("dtype") and env["dtype"] != dtype_name(dtype):
        raise PeagleError(f"{out_dir} holds {env['dtype']} results; this run is {dtype_name(dtype)}. Fix: write "
                          f"to a folder of its own, e.g. data/results/{mine}/{dtype_name(dtype)}.")
    if not overwrite:
        raise PeagleError(f"{out_dir} already holds benchmark results. Fix: --overwrite to replace them, or "
                          "another --out.")
