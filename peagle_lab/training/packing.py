"""Row packing: several training sequences in one row (one forward), in a deterministic, resumable order."""

from __future__ import annotations

import torch

from ..errors import PeagleError


class PackedRows:
    """Deterministic stream of packed rows: epoch ``e`` visits the sequences in ``randperm(seed, e)`` order and
    packs consecutive ones while the row stays within ``row_tokens`` (one sequence at least). The cursor
    (``state_dict``) is part of a checkpoint, so a resumed run sees the same rows. Every process walks the same
    stream (the rows of a step do not depend on the number of processes, so a run resumes at another world
    size); :meth:`Trainer._train_step` gives process ``r`` rows ``r, r + world, ...`` of each step."""

    def __init__(self, sequences, row_tokens: int, seed: int):
        if not len(sequences):
            raise PeagleError("No training sequences. Fix: distill some first (`peagle-lab distill`).")
        self.seqs, self.row_tokens, self.seed = sequences, row_tokens, seed
        self.epoch, self.pos = 0, 0
        self._start_epoch()

    def _perm(self, n, epoch):
        return torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 100003 + epoch))

    # the order of one epoch: a subclass reading from disk (training.stream.StreamedRows) replaces these three
    def _start_epoch(self):
        self._order = self._perm(len(self.seqs), self.epoch)

    def _epoch_len(self) -> int:
        return len(self._order)

    def _at(self, pos: int) -> dict:
        return self.seqs[int(self._order[pos])]

    def _next_row(self):
        row, tokens = [], 0
        while True:
            if self.pos >= self._epoch_len():
                if row:
                    return row
                self.epoch, self.pos = self.epoch + 1, 0
                self._start_epoch()
            s = self._at(self.pos)
            n = len(s["input_ids"])
            if row and tokens + n > self.row_tokens:
                return row
            row.append(s)
            tokens += n
            self.pos += 1

    def next_rows(self, tokens_wanted: int, min_rows: int = 1) -> list[list[dict]]:
        """The rows of one optimizer step (the global batch): at least ``tokens_wanted`` tokens and ``min_rows``
        rows."""
        rows, tokens = [], 0
        while tokens < tokens_wanted or len(rows) < min_rows:
            row = self._next_row()
            rows.append(row)
            tokens += sum(len(s["input_ids"]) for s in row)
        return rows

    def epochs_done(self) -> float:
        """Passes over the sequences so far: completed epochs plus the fraction of the current one."""
        return self.epoch + self.pos / max(self._epoch_len(), 1)

    def state_dict(self):
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, st):
        self.epoch, self.pos = st["epoch"], st["pos"]
        self._start_epoch()
