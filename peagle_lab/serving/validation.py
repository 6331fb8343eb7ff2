"""What vLLM needs of a drafter checkpoint, checked before vLLM sees it: every tensor's shape, ascending taps, the
mask slots' hidden state of a parallel head, d2t, a RoPE the head can build, and agreement with the target. Every
problem is listed with its fix.

The head comes as its :class:`~peagle_lab.drafter.config.PEagleConfig` (which has read and checked config.json: its
fields, the mask token id and its range) and its tensors."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ..drafter.checkpoint import drafter_shapes
from ..drafter.config import PEagleConfig
from ..drafter.vocab import d2t_in_vocab
from ..errors import PeagleError


def validate_head(cfg: PEagleConfig, tensors: dict[str, torch.Tensor], target_cfg: dict | None = None,
                  parallel: bool | None = None) -> None:
    """Raise PeagleError listing every problem that would make vLLM fail or serve a different function.
    ``target_cfg``: the target's config.json (as a dict); ``parallel``: default, the head's own mode."""
    if parallel is None:
        parallel = cfg.mode == "parallel"
    problems = _tap_problems(cfg) + _shape_problems(cfg, tensors)
    if parallel:
        problems += _mask_problems(cfg, tensors)
    problems += _embedding_problems(cfg, tensors) + _vocab_problems(cfg, tensors) + _rope_problems(cfg)
    if target_cfg is not None:
        problems += _target_problems(cfg, target_cfg)
    if problems:
        raise PeagleError("Drafter checkpoint cannot be served by vLLM:\n- " + "\n- ".join(problems))


def _tap_problems(cfg: PEagleConfig) -> list[str]:
    taps = list(cfg.aux_hidden_state_layer_ids)
    if taps != sorted(set(taps)):
        return [f"eagle_aux_hidden_state_layer_ids {taps} must be strictly ascending: vLLM sorts and de-duplicates "
                "them before concatenating the states, so fc would see another order than in training. Fix: train "
                "with ascending, distinct taps"]
    return []


def _shape_problems(cfg: PEagleConfig, tensors: dict) -> list[str]:
    problems = []
    for name, shape in drafter_shapes(cfg).items():
        if name not in tensors:
            problems.append(f"missing tensor '{name}' (expected shape {shape})")
        elif tuple(tensors[name].shape) != shape:
            problems.append(f"'{name}' has shape {tuple(tensors[name].shape)}, expected {shape} from config.json")
    return problems


def _embedding_problems(cfg: PEagleConfig, tensors: dict) -> list[str]:
    problems = []
    h, vocab = cfg.hidden_size, cfg.vocab_size
    if "embed_tokens.weight" in tensors and tuple(tensors["embed_tokens.weight"].shape) != (vocab, h):
        problems.append(f"'embed_tokens.weight' has shape {tuple(tensors['embed_tokens.weight'].shape)}, "
                        f"expected {(vocab, h)}")
    if "mask_embedding" in tensors and tensors["mask_embedding"].numel() != h:
        problems.append(f"'mask_embedding' has {tensors['mask_embedding'].numel()} values, expected {h}")
    return problems


def _mask_problems(cfg: PEagleConfig, tensors: dict) -> list[str]:
    """A parallel head's mask slots: one learned pre-fc hidden state (the mask token id is the config's)."""
    fc_in = cfg.num_taps * cfg.target_hidden_size
    if "mask_hidden" not in tensors:
        return ["no 'mask_hidden' tensor: a parallel-drafting head needs the learned hidden state of the mask slots "
                "(shape (1,1,3H), before fc). Fix: save a head trained in parallel mode, or serve it with "
                "parallel=False (plain EAGLE-3)"]
    if tensors["mask_hidden"].numel() != fc_in:
        return [f"'mask_hidden' has {tensors['mask_hidden'].numel()} values, expected {fc_in} "
                "(n_taps * target_hidden_size, stored before fc)"]
    return []


def _vocab_problems(cfg: PEagleConfig, tensors: dict) -> list[str]:
    """A reduced draft vocabulary needs a d2t map into the target's."""
    vocab, dv = cfg.vocab_size, cfg.draft_vocab_size
    if dv == vocab:
        return []
    d2t = tensors.get("d2t")
    if d2t is None:
        return [f"draft_vocab_size {dv} != vocab_size {vocab} but there is no 'd2t' tensor to map draft ids to "
                "target ids"]
    if tuple(d2t.shape) != (dv,):
        return [f"'d2t' has shape {tuple(d2t.shape)}, expected ({dv},)"]
    if not d2t_in_vocab(d2t.long(), vocab):
        return [f"'d2t' maps draft ids outside the target vocabulary [0, {vocab})"]
    return []


def _rope_problems(cfg: PEagleConfig) -> list[str]:
    """The head's rotary embedding builds from its ``rope_parameters`` (vLLM builds the same one)."""
    from ..drafter.network import RotaryTables

    try:
        RotaryTables(cfg)
    except PeagleError as exc:
        return [str(exc)]
    return []


def _target_problems(cfg: PEagleConfig, target_cfg: dict) -> list[str]:
    """Agreement with the target (:meth:`PEagleConfig.target_problems`: taps in range, the same vocabulary and
    hidden size; vLLM feeds target-width embeddings and sizes the mask slots' hidden state from it)."""
    fit = cfg.target_problems(SimpleNamespace(**target_cfg))
    return [f"{p}. Fix: train the head for this target (same tokenizer, hidden size and layers) or pass the right "
            "target" for p in fit]
