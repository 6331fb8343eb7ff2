"""One writer per output: :func:`hold` takes an exclusive lock on a file or folder a run writes (distill ``--out``,
train ``--out`` / ``--state-dir``, extract ``--out``, export-vllm's output, bench's results folder) for the whole
run, and sweeps what an interrupted run of it left behind.

The lock is ``.<name>.lock`` beside the output: ``fcntl.flock`` on it decides who holds it (the kernel drops the
lock when its process dies, so a killed run never blocks the next one), and the file holds the holder's pid, host,
command and start time, for the error a second run gets and for the line that says a dead run's lock was taken
over. A lock written on another host is never taken over (its process cannot be checked from here). Holding is
re-entrant within a process: a command locks its outputs before the model loads, the functions it calls lock them
again for their own callers (notebooks), and only the outermost hold sweeps and releases.

Why not the ``filelock`` package (installed with huggingface_hub): its flock lock records no holder, and the
holder records and stale-lock recovery of its soft locks need filelock >= 4, which nothing here pins."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path

from .errors import PeagleError

_held: dict[str, list] = {}  # lock path -> [fd, depth, folders made for the lock]


def lock_path(output) -> Path:
    """``.<name>.lock`` beside ``output`` (beside, not inside: an output folder may be swapped whole)."""
    output = Path(output)
    return output.parent / f".{output.name}.lock"


def _command() -> str:
    """This process's command line, short: ``peagle-lab distill ...`` for the CLI, else the program's name."""
    first = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    if Path(first).parts[-3:] == ("peagle_lab", "cli", "__main__.py") or Path(first).name == "peagle-lab":
        name = "peagle-lab"
    else:
        name = "python -c" if first == "-c" else Path(first).name
    text = " ".join([name, *(shlex.quote(a) for a in sys.argv[1:])])
    return text if len(text) <= 200 else text[:197] + "..."


def _holder_record() -> dict:
    return dict(pid=os.getpid(), host=socket.gethostname(), command=_command(),
                since=time.strftime("%Y-%m-%d %H:%M:%S %Z"))


def describe(holder: dict) -> str:
    return (f"pid {holder.get('pid')} on host {holder.get('host')}, `{holder.get('command')}`, since "
            f"{holder.get('since')}")


def _read_holder(fd: int) -> dict | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 65536)
    try:
        holder = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError, TypeError):
        return False
    except PermissionError:
        return True
    return True


def _is_rank_zero() -> bool:
    """Under ``torchrun`` / ``accelerate launch`` only rank 0 writes, so only it locks."""
    return os.environ.get("RANK", "0") == "0"


def _missing_folders(path: Path) -> list[Path]:
    """The folders above ``path`` that do not exist yet, deepest first."""
    out, p = [], path.parent
    while not p.exists() and p != p.parent:
        out.append(p)
        p = p.parent
    return out


def _open_locked(output: Path, path: Path) -> int:
    """A descriptor of ``path`` with the exclusive flock held, or a PeagleError naming the holder."""
    for _ in range(20):  # another run may remove the lock file between our open and our flock: open it again
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise PeagleError(f"Cannot create the lock {path} for {output} ({exc.strerror or exc}). Fix: choose a "
                              "writable output path.") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd) or {}
            os.close(fd)
            raise PeagleError(f"{output} is being written by another run ({describe(holder)}). Fix: wait until it "
                              "ends, or write to another output path.") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)
    raise PeagleError(f"Could not lock {output}: its lock file {path} keeps changing. Fix: check which runs write "
                      "to it.")


def acquire(output) -> bool:
    """Lock ``output`` for this process; True when this call took it (False: already held here, depth + 1)."""
    output = Path(output)
    path = lock_path(output)
    key = str(path.absolute())
    if key in _held:
        _held[key][1] += 1
        return False
    made = _missing_folders(path)
    try:
        fd = _open_locked(output, path)
    except PeagleError:
        _remove_empty(made)
        raise
    previous = _read_holder(fd)
    me = _holder_record()
    if previous:
        if previous.get("host") != me["host"]:
            os.close(fd)
            _remove_empty(made)
            raise PeagleError(f"{output} is locked by a run on another host ({describe(previous)}), which cannot "
                              f"be checked from here. Fix: if no run there writes it any more, delete {path}.")
        state = "still running (another program now has its pid)" if _pid_alive(previous.get("pid")) else \
            "no longer running"
        print(f"peagle-lab: taking over the lock of {output} left by a run that ended without releasing it "
              f"({describe(previous)}; {state})", file=sys.stderr)
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(me) + "\n").encode("utf-8"))
    os.fsync(fd)
    _held[key] = [fd, 1, made]
    return True


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders the lock alone needed, when nothing else was written into them (deepest first)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def release(output) -> None:
    path = lock_path(output)
    key = str(path.absolute())
    entry = _held.get(key)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] > 0:
        return
    del _held[key]
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # while still holding it: a run waiting on the old file opens the path again
    os.close(entry[0])
    _remove_empty(entry[2])


def leftovers(output) -> list[Path]:
    """What an interrupted write of ``output`` leaves: temporary files and folders of :mod:`.atomic`
    (``.<name>.*.tmp``) and of export-vllm (its staging folder, ``.<name>.old``) beside it, and the temporary
    files of :mod:`.atomic` anywhere inside it when it is a folder."""
    output = Path(output)
    found = [*output.parent.glob(f".{output.name}.*.tmp"), *output.parent.glob(f".{output.name}.old")]
    if output.is_dir() and not output.is_symlink():
        found += [p for p in output.rglob(".*.tmp") if p.name.count(".") >= 3]
    return sorted(set(found))


def sweep(output) -> int:
    """Remove :func:`leftovers` of ``output`` (call it only while holding its lock); returns how many."""
    found = leftovers(output)
    for p in found:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    if found:
        print(f"peagle-lab: removed {len(found)} temporary file(s)/folder(s) an interrupted run left at {output}",
              file=sys.stderr)
    return len(found)


@contextlib.contextmanager
def hold(*outputs):
    """Hold the locks of ``outputs`` (paths; None entries are skipped) for the ``with`` block; the outermost
    hold of each also sweeps its :func:`leftovers` first. Raises PeagleError when another run holds one."""
    paths = []
    for o in outputs:
        if o is not None and Path(o).absolute() not in [p.absolute() for p in paths]:
            paths.append(Path(o))
    if not _is_rank_zero():
        yield
        return
    taken = []
    try:
        for p in paths:
            if acquire(p):
                sweep(p)
            taken.append(p)
        yield
    finally:
        for p in reversed(taken):
            release(p)
