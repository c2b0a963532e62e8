"""A server started as a child process for as long as a block runs, and always stopped after it.

    with launched(["transformers", "serve", DIR, "--port", "8711"], "http://127.0.0.1:8711") as server:
        ...  # server.url answers; server.log holds what it printed

The server is ready when GET {url}/health (or /v1/models) answers 200; if it
exits first, or is not ready within `ready_timeout_s`, ServerFailed says so
with the last lines of its log. On leaving the block, pass or fail, its whole
process group gets SIGTERM, then SIGKILL after `stop_timeout_s`.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
import os
from pathlib import Path
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

READY_PATHS = ("/health", "/v1/models")
LOG_TAIL_LINES = 15


class ServerFailed(Exception):
    """The server exited, or never answered, before it was ready."""


@dataclass(slots=True)
class Server:
    url: str
    process: subprocess.Popen
    log: Path

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the OS's pick; another process could still take it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def answers(url: str, timeout_s: float = 2.0) -> bool:
    for path in READY_PATHS:
        try:
            with urllib.request.urlopen(url + path, timeout=timeout_s) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return False


def stop(process: subprocess.Popen, stop_timeout_s: float) -> None:
    """SIGTERM to the process group, SIGKILL if it is still there after `stop_timeout_s`."""
    if process.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=stop_timeout_s)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def launched(cmd: list[str], url: str, ready_timeout_s: float = 180.0, stop_timeout_s: float = 10.0,
             env: dict | None = None, log: Path | None = None, cwd: Path | None = None) -> Iterator[Server]:
    """Start `cmd` (its own process group, output to `log`), wait until `url` answers, yield, stop it."""
    log = Path(log) if log is not None else Path(tempfile.mkstemp(prefix="server-", suffix=".log")[1])
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
    server = Server(url.rstrip("/"), process, log)
    try:
        deadline = time.monotonic() + ready_timeout_s
        while not answers(server.url):
            if process.poll() is not None:
                raise ServerFailed(f"{cmd[0]} exited with status {process.returncode} before it served "
                                   f"{server.url}; its log ({log}) ends:\n{server.log_tail()}")
            if time.monotonic() > deadline:
                raise ServerFailed(f"{cmd[0]} did not answer at {server.url} within {ready_timeout_s:g} s; "
                                   f"its log ({log}) ends:\n{server.log_tail()}")
            time.sleep(0.25)
        yield server
    finally:
        stop(process, stop_timeout_s)
