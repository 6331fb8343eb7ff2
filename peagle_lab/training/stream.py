"""Training sequences streamed from feature shards instead of held in memory.

:func:`shard_sequences` indexes the training records in a feature directory (reading only the token ids of each
shard) and gives a :class:`ShardSequences`: the trainer's sequences, of which only a bounded window is ever
decoded. Its rows come from :class:`StreamedRows`, the packing of :class:`~.packing.PackedRows` over a streamed
order: each epoch visits the shards in a seeded random order, and the sequences of consecutive windows of
``window`` sequences in a seeded random order within the window. So at most the shards under one window are in
memory, and the order depends on (seed, epoch, position) only: a resumed run (the cursor ``epoch`` / ``pos`` is
in the training state, with the shard and row it points at) reads the same rows as an uninterrupted one.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..distill.data import MAX_SEQ_LEN
from ..errors import PeagleError
from ..features.format import read_manifest
from ..features.reader import reading_shard, sequence_key, shard_ids
from .packing import PackedRows

WINDOW = 256  # sequences shuffled together: the memory bound, in sequences (plus the shards they span)


def _load_shard(path: Path, rows: set[int], topk: int) -> dict[int, dict]:
    """The training dicts of ``rows`` of a shard (taps as float32; top-k logits cut to ``topk`` when asked)."""
    from safetensors.torch import load_file

    with reading_shard(path):
        t = load_file(str(path))
        off = t["offsets"].tolist()
    out = {}
    for r in rows:
        a, b = off[r], off[r + 1]
        s = dict(input_ids=t["input_ids"][a:b].long(), taps=t["taps"][a:b].float(), labels=t["greedy_next"][a:b].long())
        if topk:
            s |= dict(topk_values=t["topk_values"][a:b, :topk].float(), topk_indices=t["topk_indices"][a:b, :topk].long())
        out[r] = s
    return out


class ShardSequences:
    """The training sequences of a feature directory, streamed: ``len``, ``lengths``, ``prompt_lens``, iteration in
    file order (one shard decoded at a time), :meth:`anchor_labels` (labels only, no taps) and :meth:`rows` (the
    trainer's packed rows). ``items[i] = (shard index, row)`` of training sequence ``i``."""

    def __init__(self, shards: list[Path], items: list[tuple[int, int]], lengths: list[int], prompt_lens: list[int],
                 topk: int = 0, window: int = WINDOW):
        if window < 1:
            raise PeagleError(f"The shuffle window must hold at least one sequence, got {window}.")
        self.shards, self.items, self.lengths, self.prompt_lens = shards, items, lengths, prompt_lens
        self.topk, self.window = topk, window
        self.num_tokens = sum(lengths)

    def __len__(self) -> int:
        return len(self.items)

    def load(self, shard: int, rows) -> dict[int, dict]:
        return _load_shard(self.shards[shard], set(rows), self.topk)

    def sequence(self, i: int, decoded: dict) -> dict:
        """Training sequence ``i`` from ``decoded[shard][row]``, with its prompt length."""
        shard, row = self.items[i]
        return dict(decoded[shard][row], prompt_len=self.prompt_lens[i])

    def _by_shard(self) -> list[tuple[int, list[int]]]:
        """``(shard, [sequence indices in it])`` in shard order."""
        by_shard: dict[int, list[int]] = {}
        for i, (shard, _) in enumerate(self.items):
            by_shard.setdefault(shard, []).append(i)
        return sorted(by_shard.items())

    def __iter__(self):
        for shard, idx in self._by_shard():
            decoded = {shard: self.load(shard, [self.items[i][1] for i in idx])}
            for i in idx:
                yield self.sequence(i, decoded)

    def anchor_labels(self):
        """The labels the head is trained to predict (from the last prompt position on), per sequence, read
        without the taps: what the draft vocabulary is counted from."""
        from safetensors import safe_open

        for shard, idx in self._by_shard():
            with reading_shard(self.shards[shard]), safe_open(str(self.shards[shard]), framework="pt") as f:
                off, labels = f.get_tensor("offsets").tolist(), f.get_tensor("greedy_next")
            for i in idx:
                row = self.items[i][1]
                yield labels[off[row]:off[row + 1]][max(self.prompt_lens[i] - 1, 0):]

    def rows(self, row_tokens: int, seed: int) -> "StreamedRows":
        return StreamedRows(self, row_tokens, seed)


class StreamedRows(PackedRows):
    """:class:`PackedRows` over a :class:`ShardSequences`, in the streamed order (see the module). ``decoded_max``
    records the most sequences held decoded at once (the memory bound, checked by the tests)."""

    def __init__(self, sequences: ShardSequences, row_tokens: int, seed: int):
        self._decoded: dict[int, dict] = {}
        self._window_at = None
        self.decoded_max = 0
        super().__init__(sequences, row_tokens, seed)

    def _start_epoch(self):
        seqs = self.seqs
        shard_order = self._perm(len(seqs.shards), self.epoch).tolist()
        rank = {s: r for r, s in enumerate(shard_order)}
        self._order = sorted(range(len(seqs)), key=lambda i: (rank[seqs.items[i][0]], seqs.items[i][1], i))
        self._window_at, self._decoded = None, {}

    def _window(self, w: int) -> list[int]:
        """The sequence indices of window ``w`` of this epoch, in their shuffled order (decoded on first use)."""
        if self._window_at != w:
            W = self.seqs.window
            ids = self._order[w * W:(w + 1) * W]
            gen = torch.Generator().manual_seed(self.seed * 100003 + self.epoch * 7919 + w + 1)
            self._window_ids = [ids[j] for j in torch.randperm(len(ids), generator=gen).tolist()]
            rows: dict[int, list[int]] = {}
            for i in ids:
                shard, row = self.seqs.items[i]
                rows.setdefault(shard, []).append(row)
            self._decoded = {shard: self.seqs.load(shard, r) for shard, r in rows.items()}
            self.decoded_max = max(self.decoded_max, sum(len(d) for d in self._decoded.values()))
            self._window_at = w
        return self._window_ids

    def _at(self, pos: int) -> dict:
        W = self.seqs.window
        return self.seqs.sequence(self._window(pos // W)[pos % W], self._decoded)

    def state_dict(self):
        st = super().state_dict()
        if st["pos"] < self._epoch_len():  # where the cursor points, for the reader of the state
            i = self._window(st["pos"] // self.seqs.window)[st["pos"] % self.seqs.window]
            shard, row = self.seqs.items[i]
            st |= {"shard": self.seqs.shards[shard].parent.name + "/" + self.seqs.shards[shard].name, "row": row}
        return st


def shard_sequences(features_dir, records, max_seq_len: int = MAX_SEQ_LEN, tap_layers=None, topk: int = 0,
                    window: int = WINDOW) -> ShardSequences:
    """:class:`ShardSequences` of the distilled ``records`` (cut to ``max_seq_len`` as training cuts them) in the
    complete parts of ``features_dir`` (``part-*`` directories, or the directory itself) holding at least ``topk``
    logits per token; every record must be there (the fix names the extraction command)."""
    root = Path(features_dir)
    parts = [root] if (root / "manifest.json").exists() else sorted(root.glob("part-*"))
    shards, where = [], {}
    for part in parts:
        try:
            man = read_manifest(part)
        except PeagleError:
            continue
        if not man.get("complete") or man.get("topk", 0) < topk:
            continue
        if tap_layers is not None and tuple(man["tap_layers"]) != tuple(tap_layers):
            raise PeagleError(f"{part} holds taps {man['tap_layers']}, training wants {list(tap_layers)}. Fix: use "
                              "another --features directory for other tap layers.")
        for entry in man["shards"]:
            shards.append(part / entry["file"])
            for row, ids in enumerate(shard_ids(shards[-1])):
                where.setdefault(sequence_key(ids), (len(shards) - 1, row))
    items, lengths, prompt_lens, missing = [], [], [], 0
    for rec in records:
        ids = list(rec["input_ids"])[:max_seq_len]
        loc = where.get(sequence_key(ids))
        if loc is None:
            missing += 1
            continue
        items.append(loc)
        lengths.append(len(ids))
        prompt_lens.append(int(rec.get("prompt_len", 1)))
    if missing:
        raise PeagleError(f"{missing} of {len(records)} training sequences have no features in {root}"
                          + (f" with top-{topk} logits" if topk else "") + ". Fix: extract them first (`peagle-lab "
                          f"extract --distilled DATA --split train --out {root}/part-train"
                          + (f" --topk-logits {topk}" if topk else "") + "`), then train with --stream.")
    return ShardSequences(shards, items, lengths, prompt_lens, topk=topk, window=window)
