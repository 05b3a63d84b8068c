"""The sd_notify client and the shipped unit file. The watchdog must come from the event loop:
a loop that is stuck sends nothing, so systemd restarts the process."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frazil import systemd

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "frazil@.service"


def received(sock: socket.socket) -> list[str]:
    out = []
    sock.setblocking(False)
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def test_without_notify_socket_nothing_is_sent_and_nothing_fails() -> None:
    notifier = systemd.Notifier({})
    assert not notifier.enabled and notifier.watchdog_interval_s is None
    notifier.ready("x")   # no socket: does nothing


def test_watchdog_interval_is_half_of_watchdog_usec_and_only_for_this_pid() -> None:
    assert systemd.Notifier({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "4000000"}).watchdog_interval_s == 2.0
    assert systemd.Notifier({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "4000000",
                             "WATCHDOG_PID": str(os.getpid() + 1)}).watchdog_interval_s is None


def test_ready_then_watchdog_from_the_loop_then_stopping(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    notifier = systemd.Notifier({"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "200000"})   # a ping every 0.1 s
    joined = [False]

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        stop, finished = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(systemd.serve(notifier, stop, finished, ready=lambda: joined[0],
                                                 status=lambda: "2 partition(s)", tick_s=0.05))
        await asyncio.sleep(0.3)
        before_ready = received(sock)
        joined[0] = True
        await asyncio.sleep(0.3)
        running = received(sock)
        time.sleep(1.0)   # the loop is stuck: no ping may go out meanwhile
        stuck = received(sock)
        stop.set()
        await asyncio.sleep(0.2)
        finished.set()
        await task
        return before_ready, running, stuck + received(sock)

    before_ready, running, after = asyncio.run(scenario())
    notifier.close()
    assert before_ready and all(m == "WATCHDOG=1" for m in before_ready), before_ready
    assert any(m == f"READY=1\nSTATUS=2 partition(s)\nMAINPID={os.getpid()}" for m in running), running
    assert sum(m == "WATCHDOG=1" for m in running) >= 2, running
    assert "STOPPING=1" in after[0] or any(m.startswith("STOPPING=1") for m in after), after
    # the only pings after the stuck second are the ones sent once the loop ran again
    assert sum(m == "WATCHDOG=1" for m in after) <= 3, after


def test_stopping_goes_out_when_the_drain_starts_even_a_drain_shorter_than_a_tick(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    notifier = systemd.Notifier({"NOTIFY_SOCKET": str(path)})   # no watchdog: one tick is 5 s

    async def scenario() -> tuple[list[str], list[str]]:
        stop, finished = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(systemd.serve(notifier, stop, finished, ready=lambda: True,
                                                 status=lambda: "1 partition(s)", tick_s=5.0))
        await asyncio.sleep(0.05)
        stop.set()
        await asyncio.sleep(0.05)   # the drain has started, the tick is far off
        draining = received(sock)
        finished.set()
        await asyncio.wait_for(task, 1.0)   # and ends with the drain, not with the tick
        return draining, received(sock)

    draining, after = asyncio.run(scenario())
    notifier.close()
    assert [m.split("\n")[0] for m in draining] == ["READY=1", "STOPPING=1"] and not after, (draining, after)


def test_the_unit_gives_the_service_a_writable_home_for_the_jar_cache() -> None:
    """ProtectSystem=strict leaves only the state directory writable: HOME (Maven's ~/.m2 and
    frazil's ~/.cache/frazil, where Spark's jars are fetched) must be there."""
    lines = UNIT.read_text().splitlines()
    state = next(line.split("=", 1)[1] for line in lines if line.startswith("StateDirectory="))
    assert "ProtectSystem=strict" in lines and f"Environment=HOME=/var/lib/{state}" in lines


def test_an_abstract_socket_name_is_supported() -> None:
    name = f"frazil-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    notifier = systemd.Notifier({"NOTIFY_SOCKET": "@" + name})
    notifier.stopping()
    sock.settimeout(2)
    assert sock.recv(4096).decode().startswith("STOPPING=1")
    notifier.close()
    sock.close()


def test_the_unit_file_is_valid_for_systemd_and_hardened(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze (Debian's systemd package) is needed to check deploy/systemd/frazil@.service"
    text = UNIT.read_text()
    for line in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "KillSignal=SIGTERM", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "RestartPreventExitStatus=2"):
        assert line in text, line
    # verify the instance as systemd would load it, with ExecStart pointing at this checkout's frazil
    frazil = Path(sys.executable).with_name("frazil")
    unit = tmp_path / "frazil@orders.service"
    unit.write_text(text.replace("/opt/frazil/bin/frazil", str(frazil)))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr.strip() and not done.stdout.strip(), done.stdout + done.stderr
    security = subprocess.run([analyze, "security", "--offline=yes", str(unit)], capture_output=True, text=True)
    exposure = float(security.stdout.rsplit("Overall exposure level for frazil@orders.service:", 1)[1].split()[0])
    assert exposure <= 4.0, security.stdout[-2000:]   # systemd calls <= 4.0 "OK"


@pytest.mark.parametrize("typo", ["WatchdogSecs=60", "Type=notfy"])
def test_the_unit_check_catches_a_mistake(tmp_path: Path, typo: str) -> None:
    """The check above can fail: a mistyped key or value is reported."""
    analyze = shutil.which("systemd-analyze")
    assert analyze
    key = typo.split("=")[0].rstrip("s")
    text = "\n".join(typo if line.startswith(key + "=") else line for line in UNIT.read_text().splitlines())
    unit = tmp_path / "frazil@orders.service"
    unit.write_text(text.replace("/opt/frazil/bin/frazil", str(Path(sys.executable).with_name("frazil"))))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    assert done.stderr.strip() or done.returncode != 0
