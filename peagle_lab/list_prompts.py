"""A narrow domain of predictable text: requests for lists (counting, tables, sequences, calendars), written from
templates with seeded parameters, in a train and a held-out (``val``) split that share no prompt.

On such text a drafter can learn the target's habits: a head fine-tuned on the target's own answers to the train
split accepts far more per round than on open chat, which is where drafting cost, one parallel pass against K
sequential ones, decides the race. ``data/prompts/lists-train.jsonl`` and ``lists-val.jsonl`` are
:func:`list_records` written out (``python -m peagle_lab.list_prompts``): ``peagle-lab distill --prompts-file``
reads the first, the ``lists`` benchmark suite the second.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SPLIT_SIZES = {"train": 480, "val": 48}
SEEDS = {"train": 0, "val": 1}
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
ITEMS = ("apples", "chairs", "books", "cars", "birds", "cups", "shirts", "lamps", "coins", "stones")


def _alphabet(rng: random.Random) -> str:
    start = rng.randrange(26 - 12)
    end = start + rng.randint(8, 11)
    return f"Write the letters of the alphabet from {chr(65 + start)} to {chr(65 + end)}, one per line."


def _numbered(rng: random.Random, n: int) -> str:
    item = rng.choice(ITEMS)
    return f"Write a numbered list of {n + 6} {item}: '1. {item[:-1]} 1', '2. {item[:-1]} 2' and so on."


# each template: (rng, a, b, n) -> the request; a < b are numbers up to about 430, n in 2..19
TEMPLATES = (
    lambda rng, a, b, n: f"List the numbers from {a} to {b}, one per line.",
    lambda rng, a, b, n: f"Count down from {b} to {a}, separated by commas.",
    lambda rng, a, b, n: f"Write the {n} times table, from {n} x 1 to {n} x 12, one line each.",
    lambda rng, a, b, n: f"List the even numbers between {a} and {b + 20}, one per line.",
    lambda rng, a, b, n: _alphabet(rng),
    lambda rng, a, b, n: f"List the days of the week starting from {rng.choice(DAYS)}, as a numbered list.",
    lambda rng, a, b, n: f"List the months of the year starting from {rng.choice(MONTHS)}, one per line.",
    lambda rng, a, b, n: f"Square each whole number up to {n + 6}, written as 'k^2 = value', one per line.",
    lambda rng, a, b, n: _numbered(rng, n),
    lambda rng, a, b, n: f"Print the multiples of {n} from {n} to {n * 15}, separated by spaces.",
)


def _prompt(rng: random.Random) -> str:
    """One list request; the template and its parameters drawn from ``rng``."""
    a = rng.randint(1, 400)
    b = a + rng.randint(12, 30)
    n = rng.randint(2, 19)
    return TEMPLATES[rng.randrange(len(TEMPLATES))](rng, a, b, n)


def list_records() -> list[dict]:
    """Every prompt of both splits: ``{"id", "category", "split", "prompt"}``, deterministic, no prompt in both
    splits (a held-out draw that repeats a train prompt is drawn again)."""
    seen: set[str] = set()
    records = []
    for split, size in SPLIT_SIZES.items():
        rng, count = random.Random(SEEDS[split]), 0
        while count < size:
            text = _prompt(rng)
            if text in seen:
                continue
            seen.add(text)
            records.append({"id": f"lists-{split}-{count:03d}", "category": "lists", "split": split, "prompt": text})
            count += 1
    return records


def lists_file(split: str) -> Path:
    """``data/prompts/lists-<split>.jsonl``."""
    from .errors import PeagleError
    from .settings import data_dir

    if split not in SPLIT_SIZES:
        raise PeagleError(f"Unknown split {split!r} of the list prompts. Fix: {' or '.join(SPLIT_SIZES)}.")
    return data_dir() / "prompts" / f"lists-{split}.jsonl"


def lists_split(split: str, n: int | None = None) -> list[dict]:
    """The committed records of ``split`` (``train`` or ``val``), the first ``n`` of them."""
    from .errors import PeagleError

    path = lists_file(split)
    if not path.exists():
        raise PeagleError(f"{path.name} is missing. Fix: python -m peagle_lab.list_prompts (writes it).")
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if n is not None and n > len(records):
        raise PeagleError(f"The {split} split of the list prompts has {len(records)} prompts, not {n}. Fix: -n "
                          f"{len(records)} or fewer.")
    return records[:n]


def main(argv: list[str] | None = None) -> None:
    from .atomic import write_text

    parser = argparse.ArgumentParser(description="write the list prompts, one JSONL file per split")
    parser.add_argument("--out-dir", type=Path, default=None, help="folder (default: data/prompts)")
    args = parser.parse_args(argv)
    records = list_records()
    for split in SPLIT_SIZES:
        out = (args.out_dir / lists_file(split).name) if args.out_dir else lists_file(split)
        mine = [r for r in records if r["split"] == split]
        write_text(out, "".join(json.dumps(r) + "\n" for r in mine))
        print(f"{out.name}: {len(mine)} prompts")


if __name__ == "__main__":
    main()
