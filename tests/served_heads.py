"""A tiny served target (random Llama: hidden 32, 4 layers, vocab 96) saved as a plain HF directory, and heads
for it saved in the project's layout (taps 0, 2, 3; mask token 5; a learned mask row)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from peagle_lab.drafter import PEagleConfig, PEagleDrafter

from conftest import make_tiny_llama

TAPS = (0, 2, 3)
MASK_ID = 5


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    """A tiny random Llama target (hidden 32, 4 layers, vocab 96) as a plain HF directory."""
    path = tmp_path_factory.mktemp("target")
    make_tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=96).save_pretrained(path)
    return path


def serving_target():
    return make_tiny_llama(hidden=32, layers=4, heads=4, kv_heads=2, vocab=96)


def make_head(path, target_dir, draft_vocab_size=None, num_layers=2, shared=True, seed=1, mode="parallel") -> Path:
    target = serving_target()
    cfg = PEagleConfig.from_target(target.config, num_hidden_layers=num_layers, aux_layer_ids=TAPS,
                                   mask_token_id=MASK_ID, draft_vocab_size=draft_vocab_size,
                                   embed_shared_with_target=shared, target=str(target_dir),
                                   num_speculative_tokens=4, mode=mode)
    torch.manual_seed(seed)
    head = PEagleDrafter(cfg).init_from_target(target) if draft_vocab_size is None else PEagleDrafter(cfg)
    if draft_vocab_size is not None:
        head.set_draft_vocab(torch.arange(3, 3 + draft_vocab_size))
    with torch.no_grad():
        head.embed_tokens.weight[MASK_ID] += 1.0  # a learned mask row that differs from the target's
        head.mask_hidden.normal_()
    return head.save_pretrained(path, dtype=torch.float32)
