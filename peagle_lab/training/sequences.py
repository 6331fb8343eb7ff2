"""The training sequences: distilled records with the frozen target's features (taps and greedy labels), computed
online or read from (and added to) a cache of feature shards; :func:`check_data_target` refuses records distilled
from another target."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .distill import MAX_SEQ_LEN
from ..errors import PeagleError
from ..features import extract_features, load_features, read_manifest, sequence_features
from ..features.identity import recorded_target_problem, target_fingerprint, target_identity
from ..features.taps import check_tap_layers, default_tap_layers


def prepare_sequences(model, records, tap_layers=None, features_dir=None, taps_dtype=torch.float32,
                      max_seq_len: int = MAX_SEQ_LEN, progress: bool = True) -> list[dict]:
    """Training sequences with the frozen target's features: ``[{input_ids, taps, labels, prompt_len}]``.

    ``records``: distilled records (``input_ids`` list, ``prompt_len``). Without ``features_dir`` the features
    are computed online once and kept in memory. With it, ``features_dir`` is a cache of feature directories
    written by :func:`peagle_lab.features.extract_features` (``part-*``): sequences found in any complete part
    are read from disk, the missing ones are extracted into a new part first. So extraction can start on the
    sequences distilled so far and later runs only add what is new; both heads read the same features.
    """
    L = model.config.num_hidden_layers
    tap_layers = check_tap_layers(tap_layers or default_tap_layers(L), L)
    ids = [list(r["input_ids"])[:max_seq_len] for r in records]
    if features_dir is not None:
        feats = _cached_features(model, ids, Path(features_dir), tap_layers, progress)
    else:
        feats = [sequence_features(model, s, tap_layers, taps_dtype)
                 for s in tqdm(ids, desc="features", unit="seq", disable=not progress)]
    out = []
    for rec, f in zip(records, feats):
        out.append(dict(input_ids=f["input_ids"].long(), taps=f["taps"], labels=f["greedy_next"].long(),
                        prompt_len=int(rec.get("prompt_len", 1))))
    return out


def _seq_key(ids) -> str:
    return hashlib.sha256(torch.as_tensor(ids, dtype=torch.int32).numpy().tobytes()).hexdigest()


def _cached_features(model, ids: list[list[int]], root: Path, tap_layers, progress: bool) -> list[dict]:
    found: dict[str, dict] = {}
    for part in sorted(root.glob("part-*")):
        try:
            man = read_manifest(part)
        except PeagleError:
            continue
        if not man.get("complete"):
            continue
        if tuple(man["tap_layers"]) != tuple(tap_layers):
            raise PeagleError(f"{part} holds taps {man['tap_layers']}, training wants {list(tap_layers)}. Fix: use "
                              "another --features directory for other tap layers.")
        other = recorded_target_problem(man, model)
        if other:
            raise PeagleError(f"{part} holds features extracted from another target ({man.get('target')!r}: "
                              f"{other}). Fix: use another --features directory for this target (features are "
                              "the target's own hidden states and labels).")
        for f in load_features(part):
            found[_seq_key(f["input_ids"])] = f
    keys = [_seq_key(s) for s in ids]
    missing = list(dict.fromkeys(k for k in keys if k not in found))
    if missing and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # several writers in one directory would clash
        raise PeagleError(f"{len(missing)} sequences have no features in {root} yet, and several processes would "
                          "extract them at once. Fix: extract first in one process (`peagle-lab extract "
                          f"--distilled DATA --split train --out {root}/part-train`), then launch the training.")
    if missing:
        todo = {k: s for k, s in zip(keys, ids) if k in set(missing)}
        name = "part-" + hashlib.sha256("".join(missing).encode()).hexdigest()[:12]
        extract_features(model, [todo[k] for k in missing], root / name, tap_layers=tap_layers, progress=progress)
        for f in load_features(root / name):
            found[_seq_key(f["input_ids"])] = f
    return [found[k] for k in keys]


def check_data_target(meta: dict, model, path) -> None:
    """Refuse distilled data whose meta names another target. ``target_identity`` does not depend on the dtype
    the target was loaded in; files written before it existed carry only the exact ``target_fingerprint``, which
    is comparable only with a float32 copy of the target (a bf16 copy has other bits), so they are checked then."""
    if meta.get("target_identity"):
        ok, theirs, mine = meta["target_identity"] == target_identity(model), meta["target_identity"], \
            target_identity(model)
    elif meta.get("target_fingerprint") and next(model.parameters()).dtype == torch.float32:
        ok, theirs, mine = meta["target_fingerprint"] == target_fingerprint(model), meta["target_fingerprint"], \
            target_fingerprint(model)
    else:
        return
    if not ok:
        raise PeagleError(f"{path} was distilled from another target (fingerprint {theirs}, this target {mine}, "
                          f"{meta.get('target')!r}). Fix: train with the target it was distilled from (--target), "
                          "or distill again with this one.")
