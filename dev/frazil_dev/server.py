"""What the local test servers (schema registry, REST catalog, S3, ...) share: a process in its own
process group, logging to a file in its work folder, ready once an HTTP URL answers 200 (or a probe
says so), and stopped (idempotently) with its whole group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import requests


@dataclass
class ServerProcess:
    workdir: Path
    port: int
    proc: subprocess.Popen[bytes]

    LOG = "server.log"           # the process's output, in ``workdir``
    WHAT = "the server"          # for messages
    Error: type[Exception] = RuntimeError

    @classmethod
    def spawn(cls, argv: list[str], workdir: Path, port: int, env: dict[str, str] | None = None) -> Self:
        with open(workdir / cls.LOG, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir,
                                    env=env)
        return cls(workdir, port, proc)

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
