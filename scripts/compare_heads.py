#!/usr/bin/env python3
"""Heads compared on held-out prompts that none of them trained on: the scale mix's val split minus the 465 core
prompts (the first heads were trained on the core prompts, some of which are in the val split). Greedy, bf16
target, 1 thread, 8 prompts x 64 new tokens, K=3 and K=7.

    python scripts/compare_heads.py data/recipe/<host>/heldout_compare.json "NAME=HEAD_DIR" ...

Rows already in the file (same prompts) are kept, so heads trained later are added to the same table; a row with
the same NAME is replaced.
"""

import json
import sys
from pathlib import Path

import torch

from peagle_lab.atomic import write_json
from peagle_lab.drafter import PEagleDrafter
from peagle_lab.errors import PeagleError
from peagle_lab.models import load_target
from peagle_lab.precision import host_slug
from peagle_lab.prompts import load_scale_records, load_train_records
from peagle_lab.training import EvalSettings, evaluate_head


def main(out, pairs):
    heads = []
    for pair in pairs:
        if "=" not in pair:
            raise PeagleError(f"{pair!r}: expected NAME=HEAD_DIR. Fix: e.g. 'shipped P-EAGLE=data/heads/smollm2-135m-peagle'.")
        name, path = pair.split("=", 1)
        heads.append((name, path))
    torch.set_num_threads(1)
    model, tok = load_target(dtype=torch.bfloat16)[:2]
    core = {r["prompt"] for r in load_train_records()}
    val = [r for r in load_scale_records("val") if r["prompt"] not in core][:8]
    doc = dict(host=host_slug(), prompts=[r["id"] for r in val], max_new_tokens=64, dtype="bfloat16", rows=[])
    if Path(out).exists():
        old = json.loads(Path(out).read_text())
        if old["prompts"] != doc["prompts"]:
            raise PeagleError(f"{out} holds rows measured on other prompts. Fix: another output file.")
        doc["rows"] = [r for r in old["rows"] if r["head"] not in {n for n, _ in heads}]
    reference = {}
    for name, path in heads:
        head = PEagleDrafter.from_pretrained(path, target=model, dtype=torch.bfloat16)
        ev = evaluate_head(model, tok, head, val, EvalSettings(ks=(3, 7), max_new_tokens=64), reference=reference,
                           progress=False)
        doc["rows"].append(dict(head=name, path=path, acceptance_length=ev["acceptance_length"],
                                per_position=ev["per_position_acceptance"], divergences=len(ev["divergences"])))
        print(name, ev["acceptance_length"], flush=True)
        write_json(out, doc, indent=1)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
