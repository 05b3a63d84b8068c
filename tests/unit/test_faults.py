"""Fault points: the stop and kill-after-stop actions a zombie test relies on, and the fencing switch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frazil import faults

CHILD = """
from frazil import faults
print("before", flush=True)
faults.hit("worker.after_reply")          # kill-after-stop: nothing yet, it was never stopped
faults.hit("worker.after_files_written")  # stop: waits here for SIGCONT
print("woke", flush=True)
faults.hit("worker.after_files_written")  # disarmed after one stop
faults.hit("worker.after_reply")          # now it dies
print("still alive", flush=True)
"""


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_stop_waits_for_sigcont_and_kill_after_stop_fires_only_after_it() -> None:
    env = {"FRAZIL_FAULTS": "worker.after_files_written=stop,worker.after_reply=kill-after-stop"}
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    try:
        deadline = time.monotonic() + 30
        while _state(proc.pid) != "T":
            assert time.monotonic() < deadline and proc.poll() is None, "the child never stopped"
            time.sleep(0.05)
        proc.send_signal(signal.SIGCONT)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert out.split() == ["before", "woke"]
    assert proc.returncode == -signal.SIGKILL


def test_the_fencing_switch_and_a_bad_spec() -> None:
    try:
        assert not faults.off("fencing")
        faults.arm("fencing", "off")
        assert faults.off("fencing") and faults.armed() == "fencing=off"
        with pytest.raises(ValueError, match="actions kill, raise"):
            faults.arm("worker.before_reply", "explode")
        with pytest.raises(ValueError, match="points are"):
            faults.arm("fencing", "kill")   # a switch is not a point
    finally:
        faults.disarm()


def test_a_point_armed_for_one_table_fires_for_that_table_only() -> None:
    try:
        faults.arm("commit.before_catalog[ev.a]", "raise")
        faults.hit("commit.before_catalog")             # no table: the scoped arm is not this one
        faults.hit("commit.before_catalog", "ev.b")
        with pytest.raises(faults.InjectedFault, match=r"commit.before_catalog\[ev.a\]"):
            faults.hit("commit.before_catalog", "ev.a")
        faults.arm("commit.after_catalog[ev.a]", "raise*2")   # an outage that ends
        for _ in range(2):
            with pytest.raises(faults.InjectedFault):
                faults.hit("commit.after_catalog", "ev.a")
        faults.hit("commit.after_catalog", "ev.a")
        assert faults.armed() == "commit.before_catalog[ev.a]=raise"
        for bad in ("commit.before_catalog[]", "commit.before_catalog[ev.a", "no.such.point[ev.a]"):
            with pytest.raises(ValueError, match="point\\[table\\]"):
                faults.arm(bad, "raise")
    finally:
        faults.disarm()


def test_the_faults_file_replaces_what_is_armed_and_an_empty_one_disarms(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "faults"
    monkeypatch.setenv(faults.FILE_ENV, str(spec))
    faults.disarm()
    faults.arm("commit.before_catalog", "raise")
    try:
        spec.write_text("commit.after_catalog=raise*2\n")
        faults.rearm_from_file()
        faults.hit("commit.before_catalog")   # replaced: no longer armed
        for _ in range(2):
            with pytest.raises(faults.InjectedFault):
                faults.hit("commit.after_catalog")
        faults.hit("commit.after_catalog")    # raise*2 is spent
        spec.write_text("commit.after_catalog=raise")
        faults.rearm_from_file()
        spec.write_text("")
        faults.rearm_from_file()
        faults.hit("commit.after_catalog")
        assert faults.armed() == ""
        spec.write_text("commit.nowhere=kill")
        with pytest.raises(ValueError, match="bad fault spec"):
            faults.rearm_from_file()
    finally:
        faults.disarm()
