"""The one way this project writes a file: to a temporary name beside it, flushed to disk, then renamed over the
final name (``os.replace`` is atomic), with the usual permissions (``0666 & ~umask``, as ``open`` would give).
A reader never sees half a file, and a run killed mid-write leaves the previous version in place."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable

from .errors import PeagleError


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` to produce the file, then move it to ``path`` atomically."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise PeagleError(f"Cannot write {path} ({exc.strerror or exc}). Fix: choose a writable directory.") from exc
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except OSError as exc:
        raise PeagleError(f"Could not write {path} ({exc.strerror or exc}): the disk may be full or read-only. "
                          "Fix: free space or choose another directory; the previous file, if any, is intact.") from exc
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def write_text(path, text: str) -> Path:
    """``text`` as UTF-8, atomically."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json(path, obj, indent: int | None = 2, **kw) -> Path:
    return write_text(path, json.dumps(obj, indent=indent, **kw) + "\n")


def write_figure(path, fig, dpi: int = 110, **savefig_kw) -> Path:
    """A matplotlib figure, atomically (a reader never sees half an image), in the format its suffix names (PNG
    without one); ``savefig_kw`` go to ``fig.savefig`` (e.g. ``bbox_inches="tight"``)."""
    path = Path(path)
    fmt = savefig_kw.pop("format", None) or path.suffix.lstrip(".").lower() or "png"
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format=fmt, **savefig_kw))
    return path
