"""The test session's servers (tests/session_servers.py): started early only when a collected test
needs them, each after the servers it needs, each once; a server that cannot start fails every test
that needs it with its reason; all stopped at the end, a server before those it needs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import session_servers


class Fake:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    out: list[str] = []
    lock = threading.Lock()

    def starter(name: str) -> Any:
        def start(workdir: Path, get: Any) -> Fake:
            if name == "kafka":
                get("oauth_server")   # the broker checks the OAuth server's tokens
            if name == "kafka_connect":
                get("kafka")
            if name == "rest_catalog" and "fail rest_catalog" in out:
                raise RuntimeError("the REST catalog did not listen within 60s")
            with lock:
                out.append(f"start {name}")
            return Fake(name, out)
        return start

    monkeypatch.setattr(session_servers, "STARTERS", {name: starter(name) for name in session_servers.NAMES})
    return out


def test_only_what_the_tests_need_starts_early_each_after_what_it_needs(tmp_path: Path, log: list[str]) -> None:
    servers = session_servers.SessionServers(lambda name: tmp_path / name)
    servers.start_early({"kafka", "postgres"})
    assert servers.get("kafka").name == "kafka" and servers.get("postgres").name == "postgres"
    assert sorted(log) == ["start kafka", "start oauth_server", "start postgres"]
    assert log.index("start oauth_server") < log.index("start kafka")
    assert servers.get("s3").name == "s3"   # not needed early: started at first use, once
    assert servers.get("s3") is servers.get("s3") and log.count("start s3") == 1
    servers.stop_all()
    stops = [line for line in log if line.startswith("stop")]
    assert len(stops) == 4 and stops.index("stop kafka") < stops.index("stop oauth_server")


def test_a_server_that_cannot_start_fails_each_test_that_needs_it_with_the_reason(tmp_path: Path,
                                                                                  log: list[str]) -> None:
    log.append("fail rest_catalog")
    servers = session_servers.SessionServers(lambda name: tmp_path / name)
    servers.start_early({"rest_catalog", "hive_metastore"})
    for _ in range(2):
        with pytest.raises(RuntimeError, match="did not listen"):
            servers.get("rest_catalog")
    assert servers.get("hive_metastore").name == "hive_metastore"   # the lane goes on past it
    servers.stop_all()
    assert "stop hive_metastore" in log and "stop rest_catalog" not in log
