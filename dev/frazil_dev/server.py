"""What the local test servers (schema registry, REST catalog, S3, ...) share: a process in its own
process group, logging to a file in its work folder, ready once an HTTP URL answers 200 (or a probe
says so), and stopped (idempotently) with its whole group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import requests


@dataclass
class ServerProcess:
    workdir: Path
    port: int
    proc: subprocess.Popen[bytes]
    argv: list[str] = field(default_factory=list)      # how it was started, to start it again
    env: dict[str, str] | None = None
    probe: str | Callable[[], bool] | None = None      # what said it was ready

    LOG = "server.log"           # the process's output, in ``workdir``
    WHAT = "the server"          # for messages
    Error: type[Exception] = RuntimeError

    @classmethod
    def spawn(cls, argv: list[str], workdir: Path, port: int, env: dict[str, str] | None = None) -> Self:
        return cls(workdir, port, cls._popen(argv, workdir, env, "wb"), argv, env)

    @classmethod
    def _popen(cls, argv: list[str], workdir: Path, env: dict[str, str] | None, mode: str) -> subprocess.Popen[bytes]:
        with open(workdir / cls.LOG, mode) as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir,
                                    env=env)

    def restart(self, down_s: float, *, kill: bool = False) -> None:
        """Stop the server (SIGKILL to its whole group: a crash; else SIGTERM), stay down ``down_s``
        seconds, start it again as it was started (same port, same files) and wait until it is ready."""
        assert self.argv and self.probe is not None, "restart needs a server started by spawn and ready"
        if kill and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.stop()
        time.sleep(down_s)
        self.proc = self._popen(self.argv, self.workdir, self.env, "ab")
        self.ready(self.probe, 120)

    def log_tail(self, chars: int = 3000) -> str:
        path = self.workdir / self.LOG
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def wait_for(self, probe: Callable[[], bool], timeout_s: float, every_s: float = 0.3) -> None:
        """Until ``probe()`` is true; the process exiting first, or the time running out, is an
        ``Error`` with the end of its log."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise self.Error(f"{self.WHAT} exited during start-up:\n{self.log_tail()}")
            if probe():
                return
            time.sleep(every_s)
        raise self.Error(f"{self.WHAT} did not answer within {timeout_s:.0f}s:\n{self.log_tail()}")

    def wait_http(self, url: str, timeout_s: float, every_s: float = 0.3) -> None:
        """Until ``url`` answers 200 (``wait_for``)."""
        def answers() -> bool:
            try:
                return requests.get(url, timeout=2).status_code == 200
            except requests.RequestException:
                return False
        self.wait_for(answers, timeout_s, every_s)

    def ready(self, url: str | Callable[[], bool], timeout_s: float, every_s: float = 0.3) -> Self:
        """``wait_http`` (or ``wait_for`` a probe), stopping the process when it fails (or is
        interrupted): a server that never came up is not left behind."""
        self.probe = url
        try:
            if callable(url):
                self.wait_for(url, timeout_s, every_s)
            else:
                self.wait_http(url, timeout_s, every_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
