#!/usr/bin/env python3
"""Shipped heads against the scale-trained candidates on held-out prompts that NEITHER trained on: the scale
mix's val split minus the 465 core prompts (the shipped heads were trained on the core prompts, some of which
are in the val split). Greedy, bf16 target, 1 thread, 8 prompts x 64 new tokens, K=3 and K=7.

    python scripts/compare_heads.py data/recipe/<host>/heldout_compare.json
"""

import json
import sys

import torch

from peagle_lab.atomic import write_json
from peagle_lab.drafter import PEagleDrafter
from peagle_lab.models import load_target
from peagle_lab.precision import host_slug
from peagle_lab.prompts import load_scale_records, load_train_records
from peagle_lab.training import evaluate_head

HEADS = [("shipped P-EAGLE", "data/heads/smollm2-135m-peagle"),
         ("candidate P-EAGLE", "data/heads/candidates/smollm2-135m-peagle-scale"),
         ("shipped EAGLE-3", "data/heads/smollm2-135m-eagle3"),
         ("candidate EAGLE-3", "data/heads/candidates/smollm2-135m-eagle3-scale")]


def main(out):
    torch.set_num_threads(1)
    model, tok = load_target(dtype=torch.bfloat16)[:2]
    core = {r["prompt"] for r in load_train_records()}
    val = [r for r in load_scale_records("val") if r["prompt"] not in core][:8]
    reference, rows = {}, []
    for name, path in HEADS:
        head = PEagleDrafter.from_pretrained(path, target=model, dtype=torch.bfloat16)
        ev = evaluate_head(model, tok, head, val, ks=(3, 7), max_new_tokens=64, reference=reference, progress=False)
        rows.append(dict(head=name, path=path, acceptance_length=ev["acceptance_length"],
                         per_position=ev["per_position_acceptance"], divergences=len(ev["divergences"])))
        print(name, ev["acceptance_length"], flush=True)
    write_json(out, dict(host=host_slug(), prompts=[r["id"] for r in val], max_new_tokens=64, dtype="bfloat16",
                         rows=rows), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
