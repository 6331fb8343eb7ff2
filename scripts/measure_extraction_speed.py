#!/usr/bin/env python3
"""Feature extraction tokens/s, one sequence per target forward against batched (sequences of similar length
together, ``--batch-tokens`` padded tokens per forward), on the embedded target and the first N sequences of the
distilled scale mix's train split; the two interleaved per repeat (so drift in the machine's load hits both),
medians reported with the environment (host, threads, load before and after).

    python scripts/measure_extraction_speed.py OUT.json [--sequences 16] [--repeats 3] [--batch-tokens 2048] [--dtype D]
"""

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from peagle_lab.atomic import write_json
from peagle_lab.distill.data import MAX_SEQ_LEN, read_distilled, select_split
from peagle_lab.environment import environment
from peagle_lab.features import ExtractionSettings, extract_features
from peagle_lab.hardware import load_average
from peagle_lab.models import load_target
from peagle_lab.settings import data_path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--sequences", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_target(dtype=args.dtype)
    _, records = read_distilled(data_path("distill", "smollm2-135m-scale.jsonl"))
    records, _ = select_split(records, "train")
    seqs = [r["input_ids"][:MAX_SEQ_LEN] for r in records[: args.sequences]]
    env = environment(model=model)
    modes = {"one sequence per forward": 0, f"batched ({args.batch_tokens} tokens)": args.batch_tokens}
    rates = {name: [] for name in modes}
    with tempfile.TemporaryDirectory() as tmp:
        extract_features(model, seqs[:2], Path(tmp) / "warmup", progress=False, verbose=False)
        for r in range(args.repeats):
            for name, bt in (list(modes.items()) if r % 2 == 0 else list(modes.items())[::-1]):
                res = extract_features(model, seqs, Path(tmp) / f"{r}-{bt}", ExtractionSettings(batch_tokens=bt),
                                       progress=False, verbose=False)
                rates[name].append(round(res.tokens_per_s, 1))
                print(f"repeat {r}: {name}: {res.tokens_per_s:.1f} tokens/s")
    rows = [dict(mode=name, batch_tokens=bt, tokens_per_s=statistics.median(rates[name]), runs=rates[name])
            for name, bt in modes.items()]
    out = dict(sequences=len(seqs), tokens=sum(len(s) for s in seqs), repeats=args.repeats, rows=rows,
               speedup=round(rows[1]["tokens_per_s"] / rows[0]["tokens_per_s"], 3),
               host=env["host"], dtype=env["dtype"], torch_threads=env["torch_threads"],
               loadavg_start=env["loadavg_start"], loadavg_end=load_average(), hardware=env["hardware"])
    write_json(args.out, out, indent=1)
    print(out)


if __name__ == "__main__":
    main()
