"""A serving engine's server as a child process: started on a free loopback port, waited for until healthy, and
always stopped with every process it spawned (vLLM's API server forks engine processes), on success, failure,
Ctrl-C and SIGTERM alike."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator

from eval.errors import EvalError

STOP_GRACE_S = 20  # SIGTERM first (vLLM frees its engine), SIGKILL after this


def free_port() -> int:
    """A loopback port no one listens on now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server's whole process group: the server and the workers it forked."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # workers left behind by a server that exited by itself
    except ProcessLookupError:
        pass
    proc.wait()


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """While a server runs, SIGTERM (a scheduler's stop, `kill`) unwinds this process like Ctrl-C, so the server is
    stopped on the way out instead of left running in its own session. Only where no handler is set already."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def unwind(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def running_server(
    argv: Callable[[int], list[str]],
    *,
    name: str,
    healthy: Callable[[str], bool],
    log: Path,
    timeout_s: float,
    env: dict | None = None,
) -> Iterator[str]:
    """The base URL of a server started by argv(port), ready (healthy(url) true); stopped on leaving the block.

    A server that exits while starting is reported with the last lines of its log; one that does not become
    healthy within timeout_s is stopped and reported."""
    spec = {"argv": argv, "name": name, "healthy": healthy, "log": log, "timeout_s": timeout_s, "env": env}
    with running_servers([spec]) as (url,):
        yield url


@contextmanager
def running_servers(servers: list[dict]) -> Iterator[list[str]]:
    """Servers started together (each one running_server's keywords), their base URLs once every one is ready; all
    stopped on leaving the block. Their start-ups overlap: two `vllm serve` of a small model start on 2 CPU cores in
    little more than the time of one (their imports and engine set-up are mostly one core's work)."""
    with _sigterm_unwinds(), ExitStack() as stack:
        started = []
        for server in servers:
            proc, url = _launched(server["argv"], name=server["name"], log=server["log"], env=server.get("env"))
            stack.callback(_stop, proc)
            started.append((proc, url, time.monotonic() + server["timeout_s"], server))
        for proc, url, deadline, server in started:
            _wait_ready(proc, url, deadline, server)
        yield [url for _, url, _, _ in started]


def _launched(argv, *, name: str, log: Path, env: dict | None) -> tuple[subprocess.Popen, str]:
    """The server's process, in a session of its own (stopped with every process it forks), and its URL."""
    port = free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv(port), stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env or os.environ.copy()
        )
    return proc, f"http://127.0.0.1:{port}"


class ServerExited(EvalError):
    """A server that exited while starting; `returncode` < 0 names the signal that killed it."""

    def __init__(self, message: str, returncode: int):
        super().__init__(message)
        self.returncode = returncode


def _wait_ready(proc: subprocess.Popen, url: str, deadline: float, server: dict) -> None:
    name, log = server["name"], server["log"]
    while True:
        if proc.poll() is not None:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            raise ServerExited(
                f"{name} exited ({proc.returncode}) while starting: {tail} (log: {log})", proc.returncode
            )
        try:
            if server["healthy"](url):
                return
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise EvalError(f"{name} did not become ready in {server['timeout_s']:.0f} s (log: {log})")
        time.sleep(0.5)
