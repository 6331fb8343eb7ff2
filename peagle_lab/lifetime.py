"""No orphaned engine or server: every process this project starts dies with the command that started it, however
that command ends (Ctrl-C, SIGTERM, ``kill -9``, a crash).

Two tools, both Linux-first (vLLM runs on Linux) and harmless elsewhere:

- :func:`supervised` wraps a command line (the vLLM server) in a small supervisor, ``python -m
  peagle_lab.lifetime --parent PID -- CMD...``, started by :func:`spawn` in a session of its own, so the server and
  everything it starts share one process group. The supervisor has a parent-death signal (``prctl
  PR_SET_PDEATHSIG``, set through ctypes) and also watches its stdin, a pipe the kernel closes when the starting
  process dies, however it dies. When the parent dies, or the server ends, it clears the whole group (SIGTERM, then
  SIGKILL after a grace period) and exits with the server's code. (The kernel sends the parent-death signal when
  the *thread* that started the supervisor ends: start servers from a thread that lives as long as they should.)
- :class:`DescendantGuard` (one per process: :func:`guard_descendants`) is for an engine started inside this
  process (``vllm.LLM`` forks or spawns an EngineCore and its workers, whose parent-death handling is their own):
  a watchdog process notes this process's descendants twice a second and kills them when this process ends
  without saying it is done.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
GRACE_S = 5.0


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux); False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def supervised(cmd: list[str]) -> list[str]:
    """``cmd`` run under this module's supervisor (see the module's docstring)."""
    return [sys.executable, "-m", "peagle_lab.lifetime", "--parent", str(os.getpid()), "--", *map(str, cmd)]


def spawn(cmd: list[str], **popen_kw) -> subprocess.Popen:
    """Start ``supervised(cmd)`` in a session of its own with a stdin pipe from this process (kept open, never
    written: its end is the signal). The supervisor sets its parent-death signal itself, then checks that its
    parent is still this process (no ``preexec_fn``: unsafe in a process with threads, as torch's). Stop it with
    ``os.killpg(proc.pid, SIGINT)``."""
    return subprocess.Popen(supervised(cmd), stdin=subprocess.PIPE, start_new_session=True, **popen_kw)


# ------------------------------------------------------------------------------------------ the process table
def _stat(pid: int) -> tuple[int, int, int] | None:
    """``(parent pid, process group, start time)`` of ``pid`` from /proc, or None when it is gone (or a zombie:
    ended, waiting for its parent to collect its exit code)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    return None if fields[0] == "Z" else (int(fields[1]), int(fields[2]), int(fields[19]))


def _all_pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def descendants(root: int) -> dict[int, int]:
    """``{pid: start time}`` of every process below ``root`` (children, their children, ...)."""
    parent = {pid: st for pid in _all_pids() if (st := _stat(pid)) is not None}
    found, frontier = {}, [root]
    while frontier:
        p = frontier.pop()
        for pid, (ppid, _, start) in parent.items():
            if ppid == p and pid not in found:
                found[pid] = start
                frontier.append(pid)
    return found


def group_members(pgid: int) -> list[int]:
    return [pid for pid in _all_pids() if (st := _stat(pid)) is not None and st[1] == pgid]


def kill_all(pids: dict[int, int], grace_s: float = GRACE_S) -> None:
    """SIGTERM each process of ``{pid: start time}`` still the same process, then SIGKILL what is left after
    ``grace_s`` (a pid reused by another process is never signalled)."""
    def alive():
        return [p for p, start in pids.items() if (st := _stat(p)) is not None and st[2] == start]

    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        for p in alive():
            with contextlib.suppress(OSError):
                os.kill(p, sig)
        end = time.monotonic() + wait
        while alive() and time.monotonic() < end:
            time.sleep(0.05)


# ------------------------------------------------------------------------------------------ the supervisor
def _stdin_closed(timeout: float) -> bool:
    """True once the parent's end of the stdin pipe is closed (the parent died)."""
    try:
        ready, _, _ = select.select([sys.stdin.fileno()], [], [], timeout)
        return bool(ready) and os.read(sys.stdin.fileno(), 1) == b""
    except (OSError, ValueError):
        time.sleep(timeout)
        return False


def _clear_group(child: subprocess.Popen) -> None:
    """Everything in this supervisor's process group except itself: SIGTERM, grace, SIGKILL."""
    me, pgid = os.getpid(), os.getpgid(0)
    members = {p: st[2] for p in group_members(pgid) if p != me and (st := _stat(p)) is not None}
    if child.poll() is None and child.pid not in members:
        members[child.pid] = (_stat(child.pid) or (0, 0, 0))[2]
    kill_all(members)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=1)


def supervise(cmd: list[str], parent: int) -> int:
    """Run ``cmd``; end it and its group when ``parent`` dies or it ends; return its exit code."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *a: None)  # Ctrl-C / Server.stop reach the whole group: the server ends
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the signal was set
        return 1
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    while child.poll() is None and not stop:
        if _stdin_closed(0.2) or os.getppid() != parent:
            stop.append("parent died")
    code = child.poll()
    _clear_group(child)
    return child.returncode if code is None else code


# ------------------------------------------------------------------------------------------ the descendant guard
class DescendantGuard:
    """A watchdog for engines started in this process: while it runs, a separate process notes this process's
    descendants; if this process dies without :meth:`close`, it kills them."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "peagle_lab.lifetime", "--watch", str(os.getpid())],
                                     stdin=subprocess.PIPE, start_new_session=True)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.stdin.write(b"done\n")
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_process_guard: dict[int, DescendantGuard] = {}  # pid -> its guard (a forked child gets its own)


def guard_descendants() -> DescendantGuard:
    """This process's one :class:`DescendantGuard`, started on first use and never closed: whatever engine
    processes this process started end with it, however it ends (an in-process ``vllm.LLM``, in the CLI or a
    notebook's kernel)."""
    pid = os.getpid()
    if pid not in _process_guard or _process_guard[pid].proc.poll() is not None:
        _process_guard[pid] = DescendantGuard()
    return _process_guard[pid]


def watch(root: int) -> int:
    """The watchdog: note ``root``'s descendants until its pipe closes; kill them unless it said "done"."""
    seen: dict[int, int] = {}
    fd = sys.stdin.fileno()
    while True:
        seen.update(descendants(root))
        seen.pop(os.getpid(), None)  # this watchdog is one of them
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            data = os.read(fd, 64)
            if data.startswith(b"done"):
                return 0
            if data == b"":
                break
    for pid, start in list(seen.items()):  # orphans were reparented: their children are still found below them
        if (st := _stat(pid)) is not None and st[2] == start:
            seen.update(descendants(pid))
    seen.pop(os.getpid(), None)
    kill_all(seen)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--watch"]:
        return watch(int(argv[1]))
    if argv[:1] == ["--parent"] and "--" in argv:
        return supervise(argv[argv.index("--") + 1:], int(argv[1]))
    print("usage: python -m peagle_lab.lifetime (--parent PID -- CMD... | --watch PID)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
