"""No orphaned server or engine: what the project starts dies with the command that started it, SIGTERM and
``kill -9`` alike; a port that already answers is refused before anything starts; the health check only counts a
server whose own processes listen on the port.

The server is a cheap stand-in for vLLM's (a Python HTTP server answering ``/health`` that starts a child of its
own, as vLLM's api_server starts its EngineCore), run through the very code ``serve`` uses
(:func:`peagle_lab.serving.server.start_server`). The in-process engine of ``distill --engine vllm`` is stood in for
by a child and grandchild under the same guard the engine uses (:func:`~peagle_lab.lifetime.guard_descendants`)."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from peagle_lab import lifetime
from peagle_lab.settings import REPO_ROOT as REPO
from peagle_lab.errors import PeagleError
from peagle_lab.serving.server import check_port_free, listens_in_tree, start_server

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process tables read from /proc")

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                   os.environ.get("PYTHONPATH", "")]))

FAKE_SERVER = textwrap.dedent("""
    import http.server, subprocess, sys, time
    port = int(sys.argv[1])
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # its 'EngineCore'

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *a):
            pass

    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_server_cmd(port: int) -> list[str]:
    return [sys.executable, "-c", FAKE_SERVER, str(port)]


def alive(pids) -> list[int]:
    """The processes of ``pids`` still running (a zombie has ended)."""
    return [p for p in pids if lifetime._stat(p) is not None]


def wait_gone(pids, timeout: float = 20.0) -> list[int]:
    end = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < end:
        time.sleep(0.1)
    return alive(pids)


def start_command_with_server(port: int) -> tuple[subprocess.Popen, list[int]]:
    """A process standing for ``peagle-lab serve``: it starts the stand-in server through start_server and waits;
    returns it and the pids of everything it started (supervisor, server, the server's child)."""
    code = textwrap.dedent(f"""
        import sys, time
        from peagle_lab.serving.server import start_server
        srv = start_server({fake_server_cmd(port)!r}, {port}, "fake", timeout=60)
        print(srv.proc.pid, flush=True)
        time.sleep(600)
    """)
    cmd = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV)
    supervisor = int(cmd.stdout.readline())
    end = time.monotonic() + 10
    while len(lifetime.descendants(supervisor)) < 2 and time.monotonic() < end:
        time.sleep(0.1)
    tree = [supervisor, *lifetime.descendants(supervisor)]
    assert len(tree) >= 3, tree
    return cmd, tree


@pytest.mark.slow  # the stand-in command imports peagle_lab.serving (torch): seconds on a busy 2-core CPU
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_serve_leaves_no_server_and_frees_its_port(sig):
    port = free_port()
    cmd, tree = start_command_with_server(port)
    os.kill(cmd.pid, sig)
    cmd.wait()
    assert wait_gone(tree) == []
    check_port_free(port)  # nothing answers there any more


def test_a_stopped_server_leaves_nothing():
    port = free_port()
    srv = start_server(fake_server_cmd(port), port, "fake", timeout=60)
    tree = [srv.proc.pid, *lifetime.descendants(srv.proc.pid)]
    assert len(tree) >= 3
    line = srv.command_line()  # the server's own command, as a user would type it: no supervisor, no pid
    assert line.startswith("python -c ") and line.endswith(str(port)) and "lifetime" not in line
    srv.command = ["x", json.dumps({"model": str(REPO / "heads" / "h")})]  # a path inside a JSON argument
    assert str(REPO) not in srv.command_line() and "heads/h" in srv.command_line()
    srv.stop(timeout=10)
    assert wait_gone(tree) == []


def test_a_server_that_ends_by_itself_takes_its_children_along():
    port = free_port()
    srv = start_server(fake_server_cmd(port), port, "fake", timeout=60)
    server_pid = next(p for p in lifetime.descendants(srv.proc.pid) if lifetime._stat(p)[0] == srv.proc.pid)
    tree = [srv.proc.pid, *lifetime.descendants(srv.proc.pid)]
    os.kill(server_pid, signal.SIGKILL)  # the server crashes; its 'EngineCore' must not stay behind
    assert wait_gone(tree) == []
    srv.stop()


def test_a_port_that_already_answers_is_refused_before_anything_starts():
    port = free_port()
    other = http.server.HTTPServer(("127.0.0.1", port), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        with pytest.raises(PeagleError, match=f"port {port} .* already in use"):
            start_server(fake_server_cmd(port), port, "fake", timeout=5)
    finally:
        other.shutdown()
        other.server_close()


def test_health_counts_only_a_socket_the_servers_own_processes_listen_on():
    port = free_port()
    with socket.socket() as other:  # another program's listener, not below this process
        other.bind(("127.0.0.1", port))
        other.listen()
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            assert not listens_in_tree(helper.pid, port)
        finally:
            helper.kill()
            helper.wait()
    port = free_port()
    srv = start_server(fake_server_cmd(port), port, "fake", timeout=60)
    try:
        assert listens_in_tree(srv.proc.pid, port)
    finally:
        srv.stop(timeout=10)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_an_in_process_engines_children_die_with_the_command(sig):
    """``distill --engine vllm`` holds a vllm.LLM whose EngineCore and workers are its children and grandchildren;
    under the DescendantGuard they end when the command is killed."""
    code = textwrap.dedent("""
        import subprocess, sys, time
        from peagle_lab.lifetime import guard_descendants
        guard_descendants()  # what VllmEngine and make_llm start before vllm.LLM
        core = subprocess.Popen([sys.executable, "-c",
                                 "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
                                 "'import time; time.sleep(600)']); time.sleep(600)"])
        print(core.pid, flush=True)
        time.sleep(600)
    """)
    cmd = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV)
    core = int(cmd.stdout.readline())
    end = time.monotonic() + 10
    while not lifetime.descendants(core) and time.monotonic() < end:
        time.sleep(0.1)
    tree = [core, *lifetime.descendants(core)]
    assert len(tree) == 2
    time.sleep(1.5)  # the watchdog notes the descendants twice a second
    os.kill(cmd.pid, sig)
    cmd.wait()
    assert wait_gone(tree) == []


def test_a_closed_guard_kills_nothing():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        guard = lifetime.DescendantGuard()
        time.sleep(1.0)
        guard.close()
        assert guard.proc.returncode == 0
        assert alive([child.pid]) == [child.pid]
    finally:
        child.kill()
        child.wait()


def test_the_parent_death_signal_is_set_on_linux():
    code = ("import ctypes, signal; from peagle_lab.lifetime import set_parent_death_signal as s; "
            "assert s(signal.SIGTERM); libc = ctypes.CDLL(None); v = ctypes.c_int(); "
            "libc.prctl(2, ctypes.byref(v), 0, 0, 0); print(v.value)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, check=True)
    assert int(out.stdout) == signal.SIGTERM


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.real_model
def test_a_killed_serve_leaves_no_vllm_process_behind():
    """The real thing once: `peagle-lab serve` (plain, the embedded target) killed with -9 once it is ready; its
    api_server, EngineCore and workers are gone and the port is free."""
    pytest.importorskip("vllm")
    port = free_port()
    cmd = subprocess.Popen([sys.executable, "-m", "peagle_lab.cli", "serve", "--port", str(port),
                            "--max-model-len", "256"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(ENV, VLLM_CPU_KVCACHE_SPACE="1"))
    lines = []
    for line in cmd.stdout:
        lines.append(line)
        if line.startswith("serving "):
            break
    assert cmd.poll() is None, "".join(lines[-20:])
    tree = list(lifetime.descendants(cmd.pid))
    assert len(tree) >= 3, tree  # supervisor, api_server, EngineCore (and more)
    os.kill(cmd.pid, signal.SIGKILL)
    cmd.wait()
    assert wait_gone(tree, timeout=60) == []
    check_port_free(port)


def test_a_process_has_one_guard_and_it_ends_with_the_process():
    code = ("from peagle_lab.lifetime import guard_descendants as g; a = g(); b = g(); "
            "print(a is b, a.proc.pid, flush=True)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, check=True)
    same, watchdog = out.stdout.split()
    assert same == "True"
    assert wait_gone([int(watchdog)], timeout=10) == []
