"""The record of a training run in the head directory: ``training.json`` and ``TRAINING.md``, with the machine it
ran on and the final per-depth accuracy."""

from __future__ import annotations

from pathlib import Path

from ..atomic import write_json, write_text
from ..drafter.config import TRAINING_RECORD
from .lineage import flag_value


def write_training_record(out_dir, record: dict) -> None:
    """``training.json`` (everything) and ``TRAINING.md`` (the same for people) in the head directory."""
    out_dir = Path(out_dir)
    write_json(out_dir / TRAINING_RECORD, record, indent=2)
    c = record["config"]
    what = "P-EAGLE: slots 2..K are mask slots" if c["mode"] == "parallel" else "EAGLE-3 training-time test"
    m = record["machine"]
    lines = [f"# {out_dir.name}: {c['mode']} drafter head for {c['target']}", "",
             "Reproduce (from the repository root):", "", "```bash", record["command"], "```", "",
             "## Training",
             f"- mode: {c['mode']} ({what}), "
             f"trained for K={c['num_depths']}, {c['layers']} drafter layer(s), mask_hidden={c['mask_hidden']}, "
             f"mask embedding={c['mask_embedding']}, mask token id {record['mask_token_id']}",
             f"- data: {record['data']['sequences']} self-distilled sequences ({record['data']['tokens']:,} tokens, "
             f"{record['data']['response_tokens']:,} response tokens) from `{record['data']['file']}`"
             + (f", split `{record['data']['split']}` ({record['data'].get('left_out', 0)} held-out records left "
                "out)" if record["data"].get("split") else ""),
             f"- draft vocabulary: {record['draft_vocab']['size']} ids, covering "
             f"{100 * record['draft_vocab']['coverage']:.2f}% of the training labels",
             f"- {record['steps_done']} optimizer steps x ~{c['batch_tokens']} tokens, lr {c['lr']} (warm-up "
             f"{c['warmup_steps']}, cosine over {c['schedule']}), COD ratio {c['cod_ratio']} / min "
             f"{c['cod_min_ratio']}",
             f"- training time {record['train_time_s']:.0f} s (budget {c['time_budget_s']}), feature preparation "
             f"{record['feature_time_s']:.0f} s, stopped by {record['stopped_by']}",
             *([f"- tokens seen: {record['tokens_seen']:,} ({record['tokens_per_s']:.0f} tokens/s), precision "
                f"{record['autocast']} (`--autocast {c.get('autocast', 'auto')}`)"] if record.get("tokens_seen") else []),
             *_epoch_lines(record),
             *([f"- training tokens/s measured side by side on this run's data: float32 "
                f"{record['precision_probe']['float32']:.0f}, bf16 autocast {record['precision_probe']['bfloat16']:.0f}"]
               if record.get("precision_probe") else []),
             *([f"- features: {record['features']['source']}, {record['features']['seconds']:.0f} s"]
               if record.get("features") else []),
             f"- machine: {m['cpu']} (host {m.get('host')}), {m['cpu_count']} cores (load average "
             f"{m.get('load_average_1m')} at the end), torch "
             f"threads {m['torch_threads']}, cuda {m['cuda']}, torch {m['torch']}",
             f"- final per-depth train accuracy (mean of the last 10 steps): {record['final_train_accuracy']}", ""]
    if record.get("note"):
        lines[-1:-1] = [f"- note: {record['note']}"]
    lines += _history_lines(record) + _eval_lines(record)
    write_text(out_dir / "TRAINING.md", "\n".join(lines))


def _epoch_lines(record: dict) -> list[str]:
    """TRAINING.md's count of distinct tokens against tokens seen, and the records earlier runs already saw."""
    lines = []
    distinct = record.get("distinct_tokens") or (record.get("data") or {}).get("tokens")
    if distinct:
        epochs = record.get("epochs") or (round(record["tokens_seen"] / distinct, 2) if record.get("tokens_seen")
                                          else None)
        lines.append(f"- distinct tokens: {distinct:,}; tokens seen / distinct tokens: {epochs} epochs")
    for r in (record.get("data") or {}).get("seen_before") or []:
        lines.append(f"- records {r['records']} were already trained on by {r['head']}: this run is a further epoch "
                     "over them, not fresh data")
    return lines


def _history_lines(record: dict) -> list[str]:
    """TRAINING.md's history of a continued head (``--init-from``): the runs before this one."""
    if not record.get("history"):
        return []
    cum = record.get("cumulative") or {}
    over = (f" over {cum['distinct_tokens']:,} distinct tokens ({cum.get('epochs')} epochs)"
            if cum.get("distinct_tokens") else "")
    lines = ["## History", "", f"Continued (`--init-from`) from earlier runs; {record.get('warm_restart')}. "
             f"Cumulative over {cum.get('runs')} runs: {cum.get('tokens_seen')} tokens seen{over}, "
             f"{cum.get('steps')} steps, {cum.get('train_time_s')} s of training.", "",
             "| run | data | records | distinct tokens | tokens seen | epochs | steps | training s | precision | host |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for h in record["history"]:
        distinct, seen = h.get("distinct_tokens"), h.get("tokens_seen")
        epochs = round(seen / distinct, 2) if distinct and seen else "-"
        records = h.get("records") or flag_value(h.get("command"), "--records") or "all"
        lines.append(f"| {h.get('head')} | {h.get('data')} | {records} | {distinct or '-'} | "
                     f"{seen} | {epochs} | {h.get('steps')} | {h.get('train_time_s')} | {h.get('autocast')} | "
                     f"{h.get('host')} |")
    lines.append("")
    return lines


def _eval_lines(record: dict) -> list[str]:
    """TRAINING.md's evaluation sections (HumanEval and held-out prompts): acceptance per K."""
    lines = []
    for key in ("eval", "eval_val"):
        ev = record.get(key) or {}
        if not ev:
            continue
        where = ev.get("prompt_set", "HumanEval prompts")
        same = ("outputs identical to plain greedy" if ev.get("lossless") is True else
                f"{ev.get('dtype')}: every output identical to plain greedy or diverging only at a near-tie "
                f"({len(ev.get('divergences') or [])} divergences)")
        lines += [f"## Evaluation: {where} (greedy, {same})", "",
                  f"{ev['prompts']} prompts x up to {ev['max_new_tokens']} new tokens, mode {ev['mode']}, target "
                  f"{ev.get('dtype')}.", "",
                  "Per-position acceptance: P(slot j accepted | slots before j accepted); '-' = slot never reached.",
                  "", "| K | acceptance length | per-position acceptance |", "|---|---|---|"]
        for k, al in ev["acceptance_length"].items():
            pp = ", ".join("-" if x is None else f"{x:.2f}" for x in ev["per_position_acceptance"][k])
            lines.append(f"| {k} | {al:.3f} | {pp} |")
        lines.append("")
    return lines


def final_accuracy(log: list[dict], last: int = 10) -> list[float | None]:
    rows = log[-last:]
    if not rows:
        return []
    out = []
    for d in range(len(rows[0]["acc"])):
        vals = [r["acc"][d] for r in rows if d < len(r["acc"]) and r["acc"][d] is not None]
        out.append(round(sum(vals) / len(vals), 4) if vals else None)
    return out
