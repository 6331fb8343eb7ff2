"""What vLLM needs of a drafter checkpoint, checked before vLLM sees it: the Llama fields, every tensor's shape,
ascending taps, the mask token (id and hidden state) of a parallel head, d2t, and agreement with the target.
Every problem is listed with its fix."""

from __future__ import annotations

import torch

from ..drafter.config import MASK_ID_KEYS, mask_token_id_of, taps_of
from ..errors import PeagleError
from ..features.taps import check_tap_layers
from ..drafter.vocab import d2t_in_vocab


def expected_shapes(cfg: dict, n_taps: int) -> dict[str, tuple[int, ...]]:
    """Shapes every drafter tensor must have, from the Llama fields of its config."""
    h, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg.get("num_key_value_heads",
                                                                          cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or h // nh
    inter, th = cfg["intermediate_size"], cfg.get("target_hidden_size", h)
    dv = cfg.get("draft_vocab_size") or cfg["vocab_size"]
    shapes = {"fc.weight": (h, n_taps * th), "norm.weight": (h,), "lm_head.weight": (dv, h)}
    for i in range(cfg["num_hidden_layers"]):
        p = "midlayer." if i == 0 else f"layers.{i}."
        qkv_in = 2 * h if i == 0 else h
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (nh * hd, qkv_in), p + "self_attn.k_proj.weight": (nkv * hd, qkv_in),
            p + "self_attn.v_proj.weight": (nkv * hd, qkv_in), p + "self_attn.o_proj.weight": (h, nh * hd),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
        })
        if i == 0:
            shapes[p + "hidden_norm.weight"] = (h,)
    return shapes


def validate_head(cfg: dict, tensors: dict[str, torch.Tensor], target_cfg: dict | None = None,
                  parallel: bool | None = None) -> None:
    """Raise PeagleError listing every problem that would make vLLM fail or serve a different function."""
    missing = [f"config.json lacks '{key}' (a Llama field vLLM builds the drafter from)"
               for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                           "vocab_size") if key not in cfg]
    if missing:
        raise PeagleError("Drafter checkpoint is not exportable:\n- " + "\n- ".join(missing))
    if parallel is None:
        parallel = (cfg.get("peagle") or {}).get("mode", "parallel") == "parallel"
    problems: list[str] = []
    taps = _tap_problems(cfg, problems)
    problems += _shape_problems(cfg, tensors, taps)
    if parallel:
        problems += _mask_problems(cfg, tensors, taps)
    problems += _embedding_problems(cfg, tensors) + _vocab_problems(cfg, tensors)
    if target_cfg is not None:
        problems += _target_problems(cfg, taps, target_cfg)
    if problems:
        raise PeagleError("Drafter checkpoint cannot be served by vLLM:\n- " + "\n- ".join(problems))


def _tap_problems(cfg: dict, problems: list[str]) -> list[int]:
    """The head's taps (appending what is wrong with them to ``problems``; ``[0, 0, 0]`` when there are none)."""
    taps = taps_of(cfg)
    if taps is None:
        problems.append("config.json lacks 'eagle_aux_hidden_state_layer_ids' (the 3 target layers the head "
                        "was trained on); without it vLLM taps its default (2, L//2, L-3). Fix: write the taps "
                        "you trained with into the config")
        return [0, 0, 0]
    if list(taps) != sorted(set(taps)):
        problems.append(f"eagle_aux_hidden_state_layer_ids {taps} must be strictly ascending: vLLM sorts and "
                        "de-duplicates them before concatenating the states, so fc would see another order "
                        "than in training. Fix: train with ascending, distinct taps")
    return taps


def _shape_problems(cfg: dict, tensors: dict, taps: list[int]) -> list[str]:
    problems = []
    for name, shape in expected_shapes(cfg, len(taps)).items():
        if name not in tensors:
            problems.append(f"missing tensor '{name}' (expected shape {shape})")
        elif tuple(tensors[name].shape) != shape:
            problems.append(f"'{name}' has shape {tuple(tensors[name].shape)}, expected {shape} from config.json")
    return problems


def _embedding_problems(cfg: dict, tensors: dict) -> list[str]:
    problems = []
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    if "embed_tokens.weight" in tensors and tuple(tensors["embed_tokens.weight"].shape) != (vocab, h):
        problems.append(f"'embed_tokens.weight' has shape {tuple(tensors['embed_tokens.weight'].shape)}, "
                        f"expected {(vocab, h)}")
    if "mask_embedding" in tensors and tensors["mask_embedding"].numel() != h:
        problems.append(f"'mask_embedding' has {tensors['mask_embedding'].numel()} values, expected {h}")
    return problems


def _mask_problems(cfg: dict, tensors: dict, taps: list[int]) -> list[str]:
    """A parallel head's mask token: one id, one learned pre-fc hidden state."""
    problems = []
    fc_in = len(taps) * cfg.get("target_hidden_size", cfg["hidden_size"])
    if "mask_hidden" not in tensors:
        problems.append("no 'mask_hidden' tensor: a parallel-drafting head needs the learned hidden state of "
                        "the mask slots (shape (1,1,3H), before fc). Fix: save a head trained in parallel "
                        "mode, or serve it with parallel=False (plain EAGLE-3)")
    elif tensors["mask_hidden"].numel() != fc_in:
        problems.append(f"'mask_hidden' has {tensors['mask_hidden'].numel()} values, expected {fc_in} "
                        "(n_taps * target_hidden_size, stored before fc)")
    ids = {cfg[k] for k in MASK_ID_KEYS if cfg.get(k) is not None}
    mid = mask_token_id_of(cfg)
    if mid is None:
        problems.append("config.json has no mask token id: vLLM's parallel drafting reads 'mask_token_id' "
                        "(or 'pard_token'/'ptd_token_id'). Fix: set mask_token_id and ptd_token_id to the "
                        "id the head was trained with")
    elif len(ids) > 1:
        problems.append(f"mask token ids disagree: {sorted(ids)} (mask_token_id / ptd_token_id / pard_token)")
    elif not 0 <= mid < cfg["vocab_size"]:
        problems.append(f"mask_token_id {mid} is outside the vocabulary [0, {cfg['vocab_size']})")
    return problems


def _vocab_problems(cfg: dict, tensors: dict) -> list[str]:
    """The draft vocabulary: no larger than the target's, and a d2t map into it when smaller."""
    vocab = cfg["vocab_size"]
    dv = cfg.get("draft_vocab_size") or vocab
    if dv > vocab:
        return [f"draft_vocab_size {dv} is larger than vocab_size {vocab}"]
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


def _target_problems(cfg: dict, taps: list[int], target_cfg: dict) -> list[str]:
    """Agreement with the target: taps in range, the same vocabulary and hidden size."""
    problems = []
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    tl, th, tv = target_cfg["num_hidden_layers"], target_cfg["hidden_size"], target_cfg["vocab_size"]
    try:
        check_tap_layers(taps, tl)
    except PeagleError as exc:
        problems.append(str(exc))
    if vocab != tv:
        problems.append(f"vocab mismatch: the head has vocab_size {vocab}, the target {tv}. Fix: train the "
                        "head for this target (same tokenizer) or pass the right target")
    if cfg.get("target_hidden_size", h) != th:
        problems.append(f"hidden-size mismatch: the head's target_hidden_size is "
                        f"{cfg.get('target_hidden_size', h)}, the target's hidden_size is {th}")
    if h != th:
        problems.append(f"hidden-size mismatch: the head's hidden_size {h} differs from the target's {th}; "
                        "vLLM feeds target-width embeddings and sizes the mask slots' hidden state from it. "
                        "Fix: build the head with hidden_size = the target's")
    return problems
