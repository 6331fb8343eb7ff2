"""One process of a multi-process training run (launched by torchrun or accelerate launch from
tests/training/test_distributed.py): a tiny target and tiny sequences, the real Trainer, and a record of what it did."""

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: conftest's tiny model
from conftest import make_tiny_llama  # noqa: E402

from peagle_lab.training import PackedRows, TrainConfig, Trainer, TrainerOptions, prepare_sequences  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--stop-after", type=int, default=None)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--batch-tokens", type=int, default=96)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    writes = []
    if rank:  # every file the project writes goes through os.replace (atomic): record any from rank != 0
        real = os.replace
        os.replace = lambda a, b: (writes.append(str(b)), real(a, b))[1]
    model = make_tiny_llama(hidden=32, layers=4)
    gen = torch.Generator().manual_seed(0)
    records = [{"input_ids": torch.randint(4, 96, (18 + i % 5,), generator=gen).tolist(), "prompt_len": 4}
               for i in range(12)]
    seqs = prepare_sequences(model, records, progress=False)
    cfg = TrainConfig(num_depths=4, layers=1, draft_vocab_size=None, steps=args.steps, lr=3e-3, warmup_steps=2,
                      batch_tokens=args.batch_tokens, row_tokens=48, mask_token_id=3, save_every=2, seed=0,
                      autocast="float32")
    seen = []
    orig = PackedRows.next_rows

    def spy(self, *a, **k):
        rows = orig(self, *a, **k)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        seen.append([[int(s["input_ids"][0]) for s in r] for r in rows[rank::world]])
        return rows

    PackedRows.next_rows = spy
    tr = Trainer(cfg, model, seqs, options=TrainerOptions(out_dir=Path(args.out) / "head", resume=args.resume,
                                                          overwrite=not args.resume, progress=False, verbose=False))
    tr.train(stop_after=args.stop_after)
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(dict(
        world=tr.world, losses=[r["loss"] for r in tr.log], rows=seen, writes=writes, step=tr.step)))


if __name__ == "__main__":
    main()
