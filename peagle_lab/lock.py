"""One writer per output: :func:`hold` takes an exclusive lock on a file or folder a run writes (distill ``--out``,
train ``--out`` / ``--state-dir``, extract ``--out``, export-vllm's output, bench's results folder) for the whole
run, and sweeps what an interrupted run of it left behind.

The lock file is opened without following links: a symlink or anything but a regular file at the lock path is
refused, so a planted link cannot make a run truncate the file it points to. The holder checks (:func:`verify`,
before every atomic write and on release) that the path still names the file it locked: if a cleanup deleted or
replaced it, another run may have taken the output, and this run stops before writing, naming what happened.

Temporary files carry this tool's mark (:func:`temp_prefix`); the sweep removes only marked ones, made on this host
by a process that is gone, beside the output or directly inside an output folder (never deeper in a user's tree).

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
import glob
import hashlib
import json
import os
import shlex
import shutil
import socket
import stat
import sys
import time
from pathlib import Path

from .errors import PeagleError

_held: dict[str, list] = {}  # lock path -> [fd, depth, folders made for the lock, output]

TEMP_TAG = "peagle-tmp"


def host_mark() -> str:
    """This host, as 8 hex digits (a host name may hold dots and dashes; the mark must not)."""
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def temp_prefix(path) -> str:
    """The start of every temporary name made for ``path``: ``.<name>.peagle-tmp-<host>-<pid>-`` (then a random
    part and ``.tmp``), which says which tool, host and process made it."""
    return f".{Path(path).name}.{TEMP_TAG}-{host_mark()}-{os.getpid()}-"


def temp_owner(name: str) -> tuple[str, int] | None:
    """``(host mark, pid)`` of a temporary name :func:`temp_prefix` made, else None (not this tool's)."""
    if not name.startswith(".") or not name.endswith(".tmp") or f".{TEMP_TAG}-" not in name:
        return None
    parts = name.rsplit(f".{TEMP_TAG}-", 1)[1].split("-")
    if len(parts) < 3 or len(parts[0]) != 8 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


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


def _open_nofollow(output: Path, path: Path) -> int:
    """``path`` opened read-write (created when missing) without following a link; a regular file, else refused."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if path.is_symlink():
            raise PeagleError(f"The lock path {path} of {output} is a symlink: a run never writes through it. "
                              f"Fix: delete the link {path} (and check who made it).") from None
        raise PeagleError(f"Cannot create the lock {path} for {output} ({exc.strerror or exc}). Fix: choose a "
                          "writable output path.") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        what = "is not a regular file" if not stat.S_ISREG(st.st_mode) else "is a hard link to another file"
        raise PeagleError(f"The lock path {path} of {output} {what}: a run never writes through it. Fix: remove "
                          f"{path}, or write to another output path.")
    return fd


def _same_file(fd: int, path: Path) -> bool:
    """``path`` (not followed) still names the file open at ``fd``."""
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _open_locked(output: Path, path: Path) -> int:
    """A descriptor of ``path`` with the exclusive flock held, or a PeagleError naming the holder."""
    for _ in range(20):  # another run may remove the lock file between our open and our flock: open it again
        fd = _open_nofollow(output, path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd) or {}
            os.close(fd)
            raise PeagleError(f"{output} is being written by another run ({describe(holder)}). Fix: wait until it "
                              "ends, or write to another output path.") from None
        if _same_file(fd, path):
            return fd
        os.close(fd)
    raise PeagleError(f"Could not lock {output}: its lock file {path} keeps changing. Fix: check which runs write "
                      "to it.")


def _write_holder(fd: int, output: Path, path: Path, record: dict) -> None:
    try:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(record) + "\n").encode("utf-8"))
        os.fsync(fd)
    except OSError as exc:
        raise PeagleError(f"Cannot write the lock {path} of {output} ({exc.strerror or exc}): the disk may be full. "
                          "Fix: free space or choose another output path; nothing was written yet.") from None


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
    try:
        _write_holder(fd, output, path, me)
    except PeagleError:
        _drop_lock_file(path, made)  # while still holding it
        os.close(fd)
        raise
    _held[key] = [fd, 1, made, output]
    return True


def _drop_lock_file(path: Path, made: list[Path]) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
    _remove_empty(made)


def verify() -> None:
    """Every lock this process holds is still the file at its path: else a cleanup deleted or replaced it, another
    run may now write the output, and this run must not write (raises PeagleError naming the output)."""
    for key, (fd, _, _, output) in list(_held.items()):
        if not _same_file(fd, Path(key)):
            raise PeagleError(f"The lock {key} of {output} was deleted or replaced while this run held it (a cleanup "
                              "script, `git clean -X`?): another run may be writing it now, so this run stopped "
                              "before its next write; what it wrote before is kept. Fix: make sure no other run "
                              "writes it, then run again (it resumes), and keep .*.lock files out of cleanups.")


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
    if _same_file(entry[0], path):  # never another run's lock, which took the path after ours was removed
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # while still holding it: a run waiting on the old file opens the path again
    os.close(entry[0])
    _remove_empty(entry[2])


def _ours_and_dead(p: Path) -> bool:
    owner = temp_owner(p.name)
    return owner is not None and owner[0] == host_mark() and not _pid_alive(owner[1])


def leftovers(output) -> list[Path]:
    """What an interrupted write of ``output`` left: this tool's marked temporary files and folders
    (:func:`temp_prefix`: atomic writes, export-vllm's staging and old folders) beside it, and directly inside it
    when it is a folder, made on this host by a process no longer running."""
    output = Path(output)
    found = list(output.parent.glob(f".{glob.escape(output.name)}.{TEMP_TAG}-*.tmp"))
    if output.is_dir() and not output.is_symlink():
        found += output.glob(f".*.{TEMP_TAG}-*.tmp")
    return sorted({p for p in found if _ours_and_dead(p)})


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
