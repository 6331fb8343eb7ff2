"""The results in words: the README.md of a results folder (command, hardware, the tables) and Markdown
tables (no pandas needed)."""

from __future__ import annotations


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
    suites = results.get("suites") or ({(e2e.get("config") or {}).get("suite") or "code": e2e} if e2e else {})
    for suite, one in suites.items():
        lines += end_to_end_section(one, suite)
    lines += ["", "Files: `drafting_cost.{json,csv}`, `end_to_end.{json,csv}` (code suite; `end_to_end_chat.*` the chat "
              "suite), `end_to_end_runs.csv` (per prompt), "
              "`round_profile.csv`, `bench.json` (headline), PNG plots. Every JSON carries the full environment "
              "record; every CSV row carries its key fields.", ""]
    return "\n".join(lines)


def end_to_end_section(e2e: dict, suite: str) -> list[str]:
    """The README lines of one suite's end-to-end result."""
    c = e2e["config"]
    ph, sh = c.get("parallel_head") or {}, c.get("sequential_head") or {}
    lines = [f"## End to end, {suite} suite (greedy, batch 1)", "",
             f"{c['n_prompts']} {c.get('prompts') or 'HumanEval'} prompts ({min(c['prompt_tokens'])}-"
             f"{max(c['prompt_tokens'])} tokens), {c['max_new_tokens']} new tokens, {c['repeats']} repeat(s), methods "
             f"interleaved per prompt. P-EAGLE head: {ph.get('source')}; EAGLE-3 head: {sh.get('source')}. "
             "speedup = tokens/s ratio to plain greedy in the same run (prefill included); decode_speedup = "
             "the same after the prefill; ideal = AL x t_step / (t_draft + t_verify); efficiency = "
             "decode_speedup / ideal.", "",
             format_table(e2e["methods"], ["method", "tokens_per_s", "speedup", "speedup_iqr", "acceptance_length",
                                           "per_position_acceptance", "decode_speedup", "ideal_speedup", "efficiency",
                                           "lossless_note"]), "",
             f"Lossless ({e2e.get('lossless_regime', 'exact')} regime: "
             + ("token for token" if e2e.get("lossless_regime", "exact") == "exact" else
                f"every divergence at a plain-run margin within {e2e.get('bf16_tie_ulps')} bf16 ulps of the top "
                "logit") + f"): **{e2e['all_lossless']}**. "
             f"Assisted generation: {e2e['assisted_generation']}", ""]
    if c.get("oracle_ks"):
        lines += [f"Oracle: the true greedy continuation (a plain greedy run of the prompt) with each draft replaced "
                  f"by a wrong token so that the conditional per-position acceptance is {c['oracle_rates']} (the "
                  f"last repeats; {c['oracle_rates_source']}), through the real loop and verification, charged one "
                  "pass of the P-EAGLE head per round: what a head with that acceptance would give on this machine.",
                  ""]
    if e2e.get("round_profile"):
        lines += ["### One round, split (median ms)", "",
                  format_table(e2e["round_profile"], ["method", "draft_ms", "verify_ms", "accept_rollback_ms",
                                                      "python_overhead_ms", "round_ms", "draft_share"]), ""]
    lines += [f"- note: {note}" for note in e2e.get("notes", [])]
    return lines


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
