"""Tiny training inputs: sequences of random tokens prepared on a target, a small training config, quiet
trainer options."""

import torch

from peagle_lab.training import TrainConfig, TrainerOptions, prepare_sequences

MASK_ID = 3


def tiny_sequences(model, n=6, length=24, prompt_len=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    records = []
    for i in range(n):
        T = length - (i % 3)
        ids = torch.randint(4, model.config.vocab_size, (T,), generator=gen).tolist()
        records.append({"input_ids": ids, "prompt_len": prompt_len})
    return prepare_sequences(model, records, progress=False)


def tiny_cfg(**kw):
    base = dict(num_depths=4, layers=1, draft_vocab_size=None, steps=6, lr=3e-3, warmup_steps=2, batch_tokens=48,
                row_tokens=48, mask_token_id=MASK_ID, save_every=0, seed=0, cod_ratio=0.7, cod_min_ratio=0.2,
                autocast="float32")
    base.update(kw)
    return TrainConfig(**base)


def quiet(**options) -> TrainerOptions:
    """Trainer options without the progress bar and the run's messages."""
    return TrainerOptions(progress=False, verbose=False, **options)
