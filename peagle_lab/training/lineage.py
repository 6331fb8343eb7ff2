"""Continuing a shipped head (``peagle-lab train --init-from HEAD_DIR``): shape checks and the training history.

A continuation starts from the head's weights with a fresh optimizer (a warm restart: Adam's moments and the
learning-rate schedule start again, with warm-up), keeps the head's draft vocabulary and mask token, and
appends the head's own record to ``history`` so the new record states cumulative data, tokens, steps and time.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from ..drafter import CONFIG, PEagleConfig
from ..drafter.config import TRAINING_RECORD
from ..errors import PeagleError
from ..settings import display_path

RECORD = TRAINING_RECORD


def check_compatible(source, wanted: dict, path) -> None:
    """Refuse an ``--init-from`` head whose shape differs from the run's, naming every mismatch.

    ``source``: the head's :class:`~peagle_lab.drafter.PEagleConfig`; ``wanted``: the run's values of any of
    ``mode``, ``num_hidden_layers``, ``draft_vocab_size``, ``hidden_size``, ``vocab_size``,
    ``aux_hidden_state_layer_ids`` (``None`` = not asked for).
    """
    have = dict(mode=source.mode, num_hidden_layers=source.num_hidden_layers,
                draft_vocab_size=source.draft_vocab_size, hidden_size=source.hidden_size,
                vocab_size=source.vocab_size, aux_hidden_state_layer_ids=list(source.aux_hidden_state_layer_ids))
    flags = dict(mode="--mode", num_hidden_layers="--layers", draft_vocab_size="--draft-vocab-size",
                 aux_hidden_state_layer_ids="the target's tap layers", hidden_size="the target (hidden size)",
                 vocab_size="the target (vocabulary)")
    problems = []
    for key, want in wanted.items():
        if want is None or have.get(key) is None:
            continue
        want = list(want) if isinstance(want, tuple) else want
        if want != have[key]:
            problems.append(f"{key}: head {have[key]!r}, this run {want!r} (set by {flags[key]})")
    if problems:
        raise PeagleError(f"--init-from {display_path(path)} does not fit this run: " + "; ".join(problems) + ". Fix: continue "
                          "with the head's settings (leave --layers/--draft-vocab-size/--mode unset), train on "
                          "data distilled from the same target, or start a new head without --init-from.")


def head_config(head_dir):
    """The :class:`~peagle_lab.drafter.PEagleConfig` of a head directory, with a clear error when it is none."""

    if not (Path(head_dir) / CONFIG).is_file():
        raise PeagleError(f"--init-from {display_path(head_dir)} is not a head directory (no {CONFIG}). Fix: pass a "
                          "directory written by `peagle-lab train`, e.g. data/heads/smollm2-135m-peagle.")
    return PEagleConfig.from_dir(head_dir)


def read_record(head_dir) -> dict | None:
    """The head's ``training.json`` (``None`` when it has none)."""
    path = Path(head_dir) / RECORD
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PeagleError(f"{display_path(path)} is not valid JSON ({e}). Fix: restore the head's training record, or continue "
                          "from a copy of the head without it (its history is then unknown).") from e


def summary(record: dict, head_dir) -> dict:
    """One history entry: what a run added (data, tokens, steps, time, where, how)."""
    c = record.get("config") or {}
    data = record.get("data") or {}
    return dict(head=Path(head_dir).name, command=record.get("command"), data=data.get("file"),
                split=data.get("split"), records=data.get("records"),
                sequences=data.get("sequences"), distinct_tokens=record.get("distinct_tokens") or data.get("tokens"),
                tokens_seen=record.get("tokens_seen"),
                steps=record.get("steps_done"), train_time_s=record.get("train_time_s"),
                autocast=record.get("autocast") or c.get("autocast"),
                host=(record.get("machine") or {}).get("host"), init_from=c.get("init_from"))


def history_of(head_dir) -> list[dict]:
    """The runs that made ``head_dir``, oldest first (its own history, then itself)."""
    rec = read_record(head_dir)
    if rec is None:
        return [dict(head=Path(head_dir).name, note="no training.json: earlier history unknown")]
    return list(rec.get("history") or []) + [summary(rec, head_dir)]


def cumulative(history: list[dict], this_run: dict) -> dict:
    """Totals over the history plus this run (``None`` where an earlier run did not record the figure): tokens
    seen, steps, seconds, runs, distinct tokens and epochs (tokens seen / distinct tokens)."""
    runs = history + [this_run]
    out = {}
    for key in ("tokens_seen", "steps", "train_time_s"):
        vals = [r.get(key) for r in runs]
        out[key] = None if any(v is None for v in vals) else round(sum(vals), 1)
    out["runs"] = len(runs)
    out["distinct_tokens"] = distinct_tokens(runs)
    out["epochs"] = (round(out["tokens_seen"] / out["distinct_tokens"], 2)
                     if out["tokens_seen"] and out["distinct_tokens"] else None)
    return out


def distinct_tokens(runs: list[dict]) -> int | None:
    """Distinct tokens over ``runs``: each run's records counted once. A run whose records lie inside an earlier
    run's (same file and split) adds none; one that overlaps an earlier run in part adds its share of records outside
    it (its tokens taken as spread evenly over its records); ``None`` where a run did not record its tokens."""
    total, seen = 0, []
    for r in runs:
        tokens = r.get("distinct_tokens")
        if tokens is None:
            return None
        span = trained_span(r)
        if span is None or span[3] is None:
            total += tokens
            continue
        data, split, start, end = span
        covered = set()
        for d, s, a, b in seen:
            if (d, s) == (data, split):
                covered |= set(range(max(a, start), min(b, end)))
        total += round(tokens * (end - start - len(covered)) / (end - start)) if end > start else 0
        seen.append(span)
    return total


def flag_value(command: str | None, flag: str) -> str | None:
    """The value of ``flag`` in a recorded command line (``None`` when absent or unreadable)."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        return None
    return next((words[i + 1] for i, w in enumerate(words[:-1]) if w == flag), None)


def trained_span(entry: dict) -> tuple[str | None, str, int, int | None] | None:
    """``(data file, split, first record, end record)`` a history entry trained on: from its own fields, else from its
    recorded command line (entries written before the split and range were recorded); ``None`` when unknown."""
    if not entry.get("data"):
        return None
    split = entry.get("split") or flag_value(entry.get("command"), "--split") or "train"
    records = entry.get("records") or flag_value(entry.get("command"), "--records")
    start = 0
    end = None
    if records:
        a, _, b = str(records).partition(":")
        start, end = int(a or 0), (int(b) if b.strip() else None)
    if entry.get("sequences") is not None:
        end = start + int(entry["sequences"]) if end is None else min(end, start + int(entry["sequences"]))
    return entry["data"], split, start, end


def seen_before(history: list[dict], this_run: dict) -> list[dict]:
    """The earlier runs of ``history`` that trained on records this run trains on again (same file, same split,
    overlapping record ranges): continuing on them is a further epoch over data already seen, not fresh data.
    ``this_run``: a :func:`summary` of the run. Each entry: ``head`` and the overlapping ``records`` ``A:B``."""
    mine = trained_span(this_run)
    if mine is None:
        return []
    file, split, start, end = mine
    out = []
    for h in history:
        theirs = trained_span(h)
        if theirs is None or theirs[0] != file or theirs[1] != split:
            continue
        lo = max(start, theirs[2])
        hi = min(x for x in (end, theirs[3]) if x is not None) if (end, theirs[3]) != (None, None) else None
        if hi is None or hi > lo:
            out.append(dict(head=h.get("head"), records=f"{lo}:{'' if hi is None else hi}"))
    return out
