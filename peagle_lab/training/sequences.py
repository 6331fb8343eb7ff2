"""The training sequences: distilled records with the frozen target's features (taps and greedy labels), computed
online or read from (and added to) a cache of feature shards; :func:`check_data_target` refuses records distilled
from another target."""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..distill.data import MAX_SEQ_LEN
from ..errors import PeagleError
from ..features import ExtractionSettings, extract_features, load_features, read_manifest
from ..features.online import ordered_features
from ..features.reader import sequence_key, shard_ids
from ..features.identity import recorded_target_problem
from ..features.taps import check_tap_layers, default_tap_layers

CACHE_BATCH_TOKENS = 2048  # padded tokens per target forward when the training feature cache extracts


@dataclass(frozen=True)
class OnlineFeatures:
    """How :func:`prepare_sequences` computes features online: the taps' dtype kept in memory, and
    ``batch_tokens`` > 0 for target forwards over several sequences of similar length (at most that many padded
    tokens each; 0: one sequence per forward)."""

    taps_dtype: torch.dtype = torch.float32
    batch_tokens: int = 0


def prepare_sequences(model, records, tap_layers=None, features_dir=None, online: OnlineFeatures = OnlineFeatures(),
                      max_seq_len: int = MAX_SEQ_LEN, progress: bool = True, topk: int = 0) -> list[dict]:
    """Training sequences with the frozen target's features: ``[{input_ids, taps, labels, prompt_len}]``, plus
    ``topk_values`` / ``topk_indices`` (T, ``topk``) of the target's logits when ``topk`` > 0 (the soft targets
    of ``--loss kl``).

    ``records``: distilled records (``input_ids`` list, ``prompt_len``). Without ``features_dir`` the features
    are computed online once and kept in memory (``online``: :class:`OnlineFeatures`). With it, ``features_dir`` is a cache of feature directories
    written by :func:`peagle_lab.features.extract_features` (``part-*``): sequences found in any complete part
    (holding at least ``topk`` logits per token) are read from disk, the missing ones are extracted into a new part first. So extraction can start on the
    sequences distilled so far and later runs only add what is new; both heads read the same features.
    """
    L = model.config.num_hidden_layers
    tap_layers = check_tap_layers(tap_layers or default_tap_layers(L), L)
    ids = [list(r["input_ids"])[:max_seq_len] for r in records]
    if features_dir is not None:
        feats = _cached_features(model, ids, Path(features_dir), tap_layers, progress, topk)
    else:
        with tqdm(total=sum(map(len, ids)), desc="features", unit="tok", disable=not progress) as bar:
            feats = ordered_features(model, ids, tap_layers, online.taps_dtype, topk, online.batch_tokens, bar.update)
    out = []
    for rec, f in zip(records, feats):
        seq = dict(input_ids=f["input_ids"].long(), taps=f["taps"], labels=f["greedy_next"].long(),
                   prompt_len=int(rec.get("prompt_len", 1)))
        if topk:  # torch.topk sorts, so the first k of a larger stored k are the top k
            seq |= dict(topk_values=f["topk_values"][:, :topk].float(), topk_indices=f["topk_indices"][:, :topk].long())
        out.append(seq)
    return out


def _complete_parts(model, root: Path, tap_layers, topk: int) -> list[Path]:
    """The complete ``part-*`` directories of ``root`` holding at least ``topk`` logits per token, each checked:
    ``tap_layers`` and the target are those of this training (a rank's part counts once its whole group is)."""
    complete = []
    for part in sorted(root.glob("part-*")):
        try:
            man = read_manifest(part)
        except PeagleError:
            continue
        if man.get("complete") and man.get("topk", 0) >= topk:  # kl needs parts with enough logits
            complete.append((part, man))
    # a rank's shard counts only once every shard of its group is complete: then every process of a launch
    # computes the same missing set (and the same part names), whenever it looks
    groups: dict[tuple, set] = {}
    for part, _ in complete:
        m = _RANK_PART.match(part.name)
        if m:
            groups.setdefault((m["tag"], int(m["w"])), set()).add(int(m["r"]))
    parts = []
    for part, man in complete:
        m = _RANK_PART.match(part.name)
        if m and groups[(m["tag"], int(m["w"]))] != set(range(int(m["w"]))):
            continue
        if tuple(man["tap_layers"]) != tuple(tap_layers):
            raise PeagleError(f"{part} holds taps {man['tap_layers']}, training wants {list(tap_layers)}. Fix: use "
                              "another --features directory for other tap layers.")
        other = recorded_target_problem(man, model)
        if other:
            raise PeagleError(f"{part} holds features extracted from another target ({man.get('target')!r}: "
                              f"{other}). Fix: use another --features directory for this target (features are "
                              "the target's own hidden states and labels).")
        parts.append(part)
    return parts


def extract_missing(model, ids: list[list[int]], root, tap_layers, progress: bool = True, topk: int = 0) -> int:
    """Extract into a new part of the feature cache ``root`` the sequences of ``ids`` that no complete part holds
    (under torchrun each process extracts its share and waits for the others'); returns how many were missing. So
    extraction can start on the sequences distilled so far, and later runs only add what is new."""
    root = Path(root)
    have = set()
    for part in _complete_parts(model, root, tap_layers, topk):
        for entry in read_manifest(part)["shards"]:
            have.update(sequence_key(s) for s in shard_ids(part / entry["file"]))
    keys = [sequence_key(s) for s in ids]
    missing = list(dict.fromkeys(k for k in keys if k not in have))
    if not missing:
        return 0
    todo = dict(zip(keys, ids))
    tag = hashlib.sha256(("".join(missing) + (f"topk{topk}" if topk else "")).encode()).hexdigest()[:12]
    world, rank = _world_rank()
    if world == 1 or len(missing) < world:  # too few to share: the first process extracts them
        parts = {f"part-{tag}": missing}
    else:  # several processes: each extracts its own shard of what is missing, then reads the others'
        parts = {f"part-{tag}-r{r}of{world}": missing[r::world] for r in range(world) if missing[r::world]}
    mine = f"part-{tag}-r{rank}of{world}" if f"part-{tag}-r{rank}of{world}" in parts else (
        f"part-{tag}" if rank == 0 else None)
    if mine in parts:
        extract_features(model, [todo[k] for k in parts[mine]], root / mine,
                         ExtractionSettings(tap_layers=tap_layers, topk=topk, batch_tokens=CACHE_BATCH_TOKENS),
                         progress=progress)
    for name in parts:
        _wait_complete(root / name)
    return len(missing)


def _cached_features(model, ids: list[list[int]], root: Path, tap_layers, progress: bool, topk: int = 0) -> list[dict]:
    """The features of ``ids`` read from the cache ``root``, extracted into it first where missing."""
    extract_missing(model, ids, root, tap_layers, progress, topk)
    found: dict[str, dict] = {}
    for part in _complete_parts(model, root, tap_layers, topk):
        for f in load_features(part):
            found[sequence_key(f["input_ids"])] = f
    return [found[sequence_key(s)] for s in ids]


_RANK_PART = re.compile(r"^part-(?P<tag>[0-9a-f]+)-r(?P<r>\d+)of(?P<w>\d+)$")


def _world_rank(env=None) -> tuple[int, int]:
    """``(WORLD_SIZE, RANK)`` of this process (``(1, 0)`` outside torchrun / accelerate launch)."""
    env = os.environ if env is None else env
    return int(env.get("WORLD_SIZE", "1") or 1), int(env.get("RANK", "0") or 0)


def _wait_complete(part: Path) -> None:
    """Wait until another process has finished writing feature part ``part`` (its manifest says complete), up to
    ``$PEAGLE_FEATURE_WAIT_S`` seconds (default 12 hours); a process that died leaves the others a clear error."""
    limit = float(os.environ.get("PEAGLE_FEATURE_WAIT_S", 12 * 3600))
    t0 = time.monotonic()
    while True:
        try:
            if read_manifest(part).get("complete"):
                return
        except PeagleError:
            pass
        if time.monotonic() - t0 > limit:
            raise PeagleError(f"{part} is not complete after {limit:.0f} s: the process extracting that shard of the "
                              "features stopped. Fix: look at that rank's log, then launch again (finished parts "
                              "are kept), or extract in one process first (`peagle-lab extract`).")
        time.sleep(min(2.0, max(limit / 10, 0.05)))


def check_data_target(meta: dict, model, path) -> None:
    """Refuse distilled data whose meta names another target (:func:`~peagle_lab.features.identity.identity_problem`
    decides)."""
    other = recorded_target_problem(meta, model)
    if other:
        raise PeagleError(f"{path} was distilled from another target ({other}, {meta.get('target')!r}). Fix: train "
                          "with the target it was distilled from (--target), or distill again with this one.")
