"""Heads compared on held-out prompts that none of them trained on: the scale mix's val split minus the core
training prompts (the first heads were trained on the core prompts, some of which are in the val split). Greedy,
bf16 target, 8 prompts x 64 new tokens, K=3 and K=7 (``peagle-lab compare-heads``); or, with ``--prompts offmix``,
the first 16 prompts of the off-mix suite (written apart from the mix's waves, in other styles: how far a head's
acceptance carries beyond the style it trained on).

The table (JSON) holds ``host``, ``prompts`` (their ids), ``max_new_tokens``, ``dtype`` and one row per head
(``head``, ``path``, ``acceptance_length``, ``per_position``, ``rounds``, ``attempted`` and ``per_prompt``
(each prompt's ``[rounds, accepted drafts]``) per K, ``divergences``). Rows already in the file
(same prompts) are kept, so heads trained later join the same table; a row with the same name is replaced."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..atomic import write_json
from ..drafter import PEagleDrafter
from ..errors import PeagleError
from ..precision import host_slug
from ..prompts import load_scale_records, load_train_records, offmix_records
from ..training import EvalSettings, evaluate_head

PROMPTS, MAX_NEW_TOKENS, KS, DTYPE = 8, 64, (3, 7), "bfloat16"
OFFMIX_PROMPTS = 16


def held_out_prompts(n: int = PROMPTS) -> list[dict]:
    """The first ``n`` prompts of the val split that are not core training prompts."""
    core = {r["prompt"] for r in load_train_records()}
    return [r for r in load_scale_records("val") if r["prompt"] not in core][:n]


def suite_prompts(suite: str) -> list[dict]:
    """The prompts of a comparison: ``heldout`` (:func:`held_out_prompts`) or ``offmix`` (the first
    :data:`OFFMIX_PROMPTS` of the off-mix suite: chat, reasoning and code in turn)."""
    if suite == "heldout":
        return held_out_prompts()
    if suite == "offmix":
        return offmix_records(OFFMIX_PROMPTS)
    raise PeagleError(f"No comparison prompts called {suite!r}. Fix: 'heldout' or 'offmix'.")


def start_table(out, prompts: list[dict], names) -> dict:
    """The table to add rows to: the rows already in ``out`` except those named ``names``, refused when they were
    measured on other prompts."""
    doc = dict(host=host_slug(), prompts=[r["id"] for r in prompts], max_new_tokens=MAX_NEW_TOKENS, dtype=DTYPE,
               rows=[])
    if Path(out).exists():
        try:
            old = json.loads(Path(out).read_text())
            same, rows = old["prompts"] == doc["prompts"], old["rows"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PeagleError(f"{out} is not a heads comparison table ({exc}). Fix: another output file.") from None
        if not same:
            raise PeagleError(f"{out} holds rows measured on other prompts. Fix: another output file.")
        doc["rows"] = [r for r in rows if r["head"] not in set(names)]
    return doc


def compare_heads(model, tokenizer, heads: list[tuple[str, str]], out, prompts: list[dict]) -> dict:
    """Each ``(name, head directory)`` scored on ``prompts`` (greedy, the reference decode shared), its row written
    to ``out`` as soon as it is measured; the table."""
    doc = start_table(out, prompts, [n for n, _ in heads])
    reference: dict = {}
    for name, path in heads:
        head = PEagleDrafter.from_pretrained(path, target=model, dtype=getattr(torch, DTYPE))
        ev = evaluate_head(model, tokenizer, head, prompts, EvalSettings(ks=KS, max_new_tokens=MAX_NEW_TOKENS),
                           reference=reference, progress=False)
        doc["rows"].append(dict(head=name, path=path, acceptance_length=ev["acceptance_length"],
                                per_position=ev["per_position_acceptance"], rounds=ev["rounds"],
                                attempted=ev["attempted"], per_prompt=ev["per_prompt"],
                                divergences=len(ev["divergences"])))
        print(name, ev["acceptance_length"], flush=True)
        write_json(out, doc, indent=1)
    return doc
