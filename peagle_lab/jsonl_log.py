"""Append-only JSONL logs (``train_log.jsonl``: one row a line, appended as the work goes). A crash or a full disk
can leave the last line cut short; :func:`append_row` first truncates the file to its last full line (:func:`heal`,
which says what it dropped), so a row is never glued onto a torn one, and :func:`read_rows` reads the full lines,
saying when it leaves out a torn last one."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .errors import PeagleError


def _tail(path: Path) -> tuple[int, bytes]:
    """``(offset, bytes)`` of what follows the last newline of ``path`` (empty when it ends with one)."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        start = max(0, size - (1 << 16))
        fh.seek(start)
        chunk = fh.read()
    cut = chunk.rfind(b"\n")
    return (start + cut + 1, chunk[cut + 1:]) if cut >= 0 or start == 0 else (size, b"")


def heal(path) -> int:
    """Make ``path`` end with a full line: a torn last line that is a whole JSON row gets its newline, any other is
    cut off (said on stderr). Returns the number of bytes dropped."""
    path = Path(path)
    if not path.is_file():
        return 0
    offset, tail = _tail(path)
    if not tail:
        return 0
    try:
        json.loads(tail.decode("utf-8"))
        whole = True
    except ValueError:
        whole = False
    with open(path, "r+b") as fh:
        if whole:
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n")
            return 0
        fh.truncate(offset)
    print(f"peagle-lab: {path}: dropped a last line cut short by an interrupted write ({len(tail)} bytes: "
          f"{tail[:60]!r})", file=sys.stderr)
    return len(tail)


def append_row(path, row: dict) -> None:
    """Append ``row`` as one line, after healing a torn end; a full disk is one error (the rows before are kept)."""
    from .atomic import write_errors
    from .lock import verify

    path = Path(path)
    verify()  # never under a lock a cleanup took away
    try:
        heal(path)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
    except write_errors() as exc:
        raise PeagleError(f"Could not append to {path} ({getattr(exc, 'strerror', None) or exc}): the disk may be "
                          "full. Fix: free space and run again with --resume; the rows before are kept.") from None


def read_rows(path) -> list[dict]:
    """The rows of the full lines of ``path``; a torn last line is left out (said on stderr), a damaged line before
    it is an error naming it."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except (ValueError, RecursionError):
            if i < len(lines) - 1:
                raise PeagleError(f"{path} is damaged at line {i + 1} (not a JSON row). Fix: delete that line (the "
                                  "rows around it are kept) or restore the file.") from None
            print(f"peagle-lab: {path}: left out its last line, cut short by an interrupted write (line {i + 1})",
                  file=sys.stderr)
    return rows
