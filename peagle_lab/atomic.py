"""The one way this project writes a file (and :func:`atomic_directory`, a directory): to a temporary name beside it, flushed to disk, then renamed over the
final name (``os.replace`` is atomic), with the usual permissions (``0666 & ~umask``, as ``open`` would give).
A reader never sees half a file, and a run killed mid-write leaves the previous version in place.

Every temporary name this project makes carries its mark (:func:`peagle_lab.lock.temp_prefix`: ``.<name>.peagle-tmp-<host>-<pid>-``),
so the sweep of what a killed run left (:func:`peagle_lab.lock.sweep`) removes only files this tool made, never a
user's ``.<name>.mine.tmp``, and never one of a live run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from . import lock
from .errors import PeagleError
from .lock import temp_prefix


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_errors() -> tuple[type, ...]:
    """What a writer raises when the disk is full or gone: OSError, and what torch.save (RuntimeError "failed
    writing file") and safetensors (SafetensorError, no OSError) raise instead."""
    try:
        from safetensors import SafetensorError
    except ImportError:  # pragma: no cover - safetensors comes with transformers
        return OSError, RuntimeError
    return OSError, RuntimeError, SafetensorError


def atomic_write(path, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` to produce the file, then move it to ``path`` atomically. A symlink at ``path`` is
    refused (outputs are never written through links), and so is a write under a lock this process no longer holds
    (:func:`peagle_lab.lock.verify`)."""
    path = Path(path)
    lock.verify()
    if path.is_symlink():
        raise PeagleError(f"{path} is a symlink; outputs are never written through a link. Fix: remove the link or "
                          "give the real path.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(path), suffix=".tmp")
    except OSError as exc:
        raise PeagleError(f"Cannot write {path} ({exc.strerror or exc}). Fix: choose a writable directory.") from exc
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~umask())
        lock.verify()
        os.replace(tmp, path)
    except write_errors() as exc:
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0][:200]
        raise PeagleError(f"Could not write {path} ({reason}): the disk may be full or read-only. "
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


@contextlib.contextmanager
def atomic_directory(path, what: str | None = None) -> Iterator[Path]:
    """The one way this project writes a directory: the caller fills the empty directory this yields (beside
    ``path``, under a marked temporary name), which then gets the usual permissions and is swapped in for ``path``
    (an existing one is moved aside first, then removed): a reader finds the old directory or the new one, never
    half of one. On any error ``path`` is left as it was and the temporary is removed; a full disk is one line
    naming ``what`` (default: ``path``)."""
    path = Path(path)
    lock.verify()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=path.parent, prefix=temp_prefix(path), suffix=".tmp"))
    except OSError as exc:
        raise PeagleError(f"Cannot write {path} ({exc.strerror or exc}). Fix: choose a writable directory.") from exc
    staging = work / path.name
    try:
        staging.mkdir()
        yield staging
        _usual_permissions(staging)
        lock.verify()
        swap_in_directory(staging, path)
    except tuple(e for e in write_errors() if e is not RuntimeError) as exc:  # the caller's own errors pass
        raise PeagleError(f"Could not write {what or path} ({str(exc).splitlines()[0][:200]}): the disk may be "
                          "full. Fix: free space or choose another directory; the previous one, if any, is "
                          "intact.") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _usual_permissions(folder: Path) -> None:
    """What ``open`` and ``mkdir`` would give under this umask, not the temporary files' 0600 and 0700."""
    mask = umask()
    os.chmod(folder, 0o777 & ~mask)
    for f in folder.rglob("*"):
        os.chmod(f, (0o777 if f.is_dir() else 0o666) & ~mask)


def swap_in_directory(staging: Path, path: Path) -> None:
    """Put the finished directory ``staging`` (on ``path``'s file system) at ``path``, replacing what is there;
    a reader finds the old one or the new one."""
    if not path.exists():
        os.replace(staging, path)
        return
    old = path.with_name(temp_prefix(path) + "old.tmp")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(path, old)
    os.replace(staging, path)
    shutil.rmtree(old, ignore_errors=True)
