"""Distributed mode under fire: worker processes SIGKILLed at random, and the coordinator killed at
each of its named fault points. An independent read of the table must find every produced
(topic, partition, offset) exactly once, and no commit id in more than one snapshot."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from frazil.status import end_offsets
from frazil_dev.kafka_broker import KafkaBroker
from harness import eos

pytestmark = [pytest.mark.chaos]

RECORDS = int(os.environ.get("FRAZIL_EOS_RECORDS", "150000"))   # make chaos-tests: 500k, make eos: 1M
KILLS = int(os.environ.get("FRAZIL_EOS_KILLS", "8"))            # make chaos-tests: 30


def _assert_exact(result: dict[str, object]) -> None:
    assert result["lost"] == 0 and result["duplicates"] == 0 and result.get("unexpected", 0) == 0, result
    assert result["snapshots_per_cycle_max"] == 1, result


def test_three_workers_killed_at_random_lose_and_duplicate_nothing(kafka: KafkaBroker, tmp_path: Path) -> None:
    seed = int(os.environ.get("FRAZIL_CHAOS_SEED", str(random.randrange(1 << 30))))
    print(f"seed {seed}")
    result = eos.kill_run(tmp_path, kafka.bootstrap, records=RECORDS, workers=3, kills=KILLS, seed=seed, progress=False,
                          topic="eos-random")
    print(result)
    assert result["kills"] >= KILLS and result["records_produced"] == RECORDS
    assert result["rows"] == result["distinct_offsets"] == RECORDS and result["stored_equals_end"]
    _assert_exact(result)


@pytest.mark.parametrize("point", [
    "coordinator.after_start_commit", "commit.before_catalog", "commit.after_catalog",
    "coordinator.after_catalog_commits", "coordinator.after_commit_complete",
    "worker.after_files_written", "worker.before_reply", "worker.after_reply",
])
def test_a_process_killed_at_each_fault_point_loses_and_duplicates_nothing(kafka: KafkaBroker, tmp_path: Path,
                                                                             point: str) -> None:
    """Both workers carry the armed point; whichever process reaches it first dies there (SIGKILL)
    and comes back without it, while the records of the cycle it was in are still to land."""
    topic = f"eos-{point.replace('.', '-').replace('_', '-')}"
    group = eos.setup(tmp_path, kafka.bootstrap, 2, interval=0.5, timeout=5.0, partitions=4, topic=topic)
    records = 20_000
    try:
        for name in ("w0", "w1"):
            group.start(name, {"FRAZIL_FAULTS": f"{point}=kill"})
        asyncio.run(eos.produce(kafka.bootstrap, topic, (eos.record(i) for i in range(records // 2)),
                                partitions=4, label=None))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and -9 not in group.exited().values():
            time.sleep(0.2)
        assert -9 in group.exited().values(), f"nobody reached {point}; tail:\n{group.tail('w0')}"
        asyncio.run(eos.produce(kafka.bootstrap, topic, (eos.record(i) for i in range(records // 2, records)),
                                partitions=4, label=None))
        ends = asyncio.run(end_offsets(kafka.bootstrap, [topic]))
        eos.wait_committed(tmp_path, ends, group, timeout=120, restart_killed=True)
    finally:
        group.stop_all()
    found = eos.count(tmp_path)
    result = {**eos.verdict(found["counts"], ends), "snapshots_per_cycle_max": found["snapshots_per_cycle_max"]}
    _assert_exact(result)
    assert result["rows"] == records, result


def _wait_for(predicate, what: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _snapshots(tmp_path: Path) -> list[dict[str, str]]:
    from frazil import config as config_mod
    from frazil.iceberg import catalog as iceberg_catalog

    cfg = config_mod.load(tmp_path / "w0.toml")
    table = iceberg_catalog.load(cfg.catalog).load_table(cfg.table.name)
    return [dict(s.summary.additional_properties) for s in table.snapshots() if s.summary is not None]


def _coordinator(group: eos.Workers) -> str:
    """The worker process that runs the coordinator now (from its log)."""
    for name in group.procs:
        text = group.tail(name, 500_000)
        if text.rfind("starting the coordinator") > text.rfind("stopping the coordinator"):
            return name
    raise AssertionError("no process runs the coordinator")


def test_idle_partitions_hold_nothing_back_and_a_silent_worker_only_until_the_timeout(kafka: KafkaBroker,
                                                                                        tmp_path: Path) -> None:
    topic = "eos-idle"
    # commit timeout 1 s, below the 3 s session timeout: a stopped worker is waited for, then skipped
    group = eos.setup(tmp_path, kafka.bootstrap, 2, interval=0.5, timeout=1.0, partitions=4, topic=topic)
    try:
        for name in ("w0", "w1"):
            group.start(name)
        _wait_for(lambda: all("replied to commit" in group.tail(n, 20000) for n in ("w0", "w1")),
                  "both workers to reply")
        # one record on partition 0, three idle partitions: it lands in a full commit, with VTTS
        asyncio.run(eos.produce(kafka.bootstrap, topic, [eos.record(0)], partitions=1, label=None))
        eos.wait_committed(tmp_path, {(topic, 0): 1}, group, timeout=30)
        landed = [s for s in _snapshots(tmp_path) if s.get(f"frazil.offsets.{topic}", "").find('"0":1') >= 0]
        assert landed and all("frazil.vtts" in s for s in landed), landed

        # a worker goes silent (SIGSTOP): the next cycles wait for it up to the timeout, then commit
        # the other worker's partitions without VTTS (partial), until the group moves its partitions
        before = len(_snapshots(tmp_path))
        silent = "w1" if _coordinator(group) == "w0" else "w0"   # not the coordinator: it must go on
        group.procs[silent].send_signal(signal.SIGSTOP)
        asyncio.run(eos.produce(kafka.bootstrap, topic, (eos.record(i) for i in range(1, 41)), partitions=4,
                                label=None))
        ends = asyncio.run(end_offsets(kafka.bootstrap, [topic]))
        eos.wait_committed(tmp_path, ends, group, timeout=60)
        after = _snapshots(tmp_path)[before:]
        assert any("frazil.vtts" not in s for s in after), "no partial commit while a worker was silent"
        group.procs[silent].send_signal(signal.SIGCONT)
        time.sleep(3)   # the zombie wakes, finds its partitions gone
    finally:
        for proc in group.procs.values():
            proc.send_signal(signal.SIGCONT)
        group.stop_all()
    found = eos.count(tmp_path)
    _assert_exact({**eos.verdict(found["counts"], ends), "snapshots_per_cycle_max": found["snapshots_per_cycle_max"]})


def test_a_zombie_worker_woken_after_its_partitions_moved_lands_nothing_twice(kafka: KafkaBroker,
                                                                              tmp_path: Path) -> None:
    topic = "eos-zombie"
    group = eos.setup(tmp_path, kafka.bootstrap, 2, interval=0.5, timeout=5.0, partitions=4, topic=topic)
    records, chunk = 40_000, 2_000
    try:
        for name in ("w0", "w1"):
            group.start(name)
        _wait_for(lambda: all("replied to commit" in group.tail(n, 20000) for n in ("w0", "w1")),
                  "both workers to reply")
        for c in range(records // chunk):
            asyncio.run(eos.produce(kafka.bootstrap, topic, (eos.record(i) for i in range(c * chunk, (c + 1) * chunk)),
                                    partitions=4, label=None))
            if c == 4:   # mid-stream, with records buffered and maybe a reply in flight
                group.procs["w1"].send_signal(signal.SIGSTOP)
            if c == 12:  # well past the 3 s session timeout: its partitions have moved to w0
                group.procs["w1"].send_signal(signal.SIGCONT)
            time.sleep(0.5)
        ends = asyncio.run(end_offsets(kafka.bootstrap, [topic]))
        eos.wait_committed(tmp_path, ends, group, timeout=120)
    finally:
        group.procs["w1"].send_signal(signal.SIGCONT)
        group.stop_all()
    found = eos.count(tmp_path)
    result = {**eos.verdict(found["counts"], ends), "snapshots_per_cycle_max": found["snapshots_per_cycle_max"]}
    _assert_exact(result)
    assert result["rows"] == records, result
    assert "partitions revoked" in group.tail("w1", 200_000) or "did not land" in group.tail("w1", 200_000)


@dataclass
class _Stream:
    """Records with consecutive ids, produced round-robin to a 4-partition topic."""

    bootstrap: str
    topic: str
    produced: int = 0

    def __call__(self, n: int) -> None:
        asyncio.run(eos.produce(self.bootstrap, self.topic,
                                (eos.record(i) for i in range(self.produced, self.produced + n)),
                                partitions=4, label=None))
        self.produced += n


def _stopped(proc: subprocess.Popen[bytes]) -> bool:
    return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.parametrize("fencing", ["on", "off"])
def test_a_zombie_reply_after_its_partitions_moved_lands_nothing_twice_and_would_without_fencing(
        kafka: KafkaBroker, tmp_path: Path, fencing: str) -> None:
    """A deterministic zombie. w1 (partitions 1 and 3; w0 holds partition 0 and coordinates) stops
    itself (SIGSTOP) right after writing the data files of a reply. Its session times out; w0 takes
    every partition and reads 1 and 3 again from the table, while the coordinator still waits for
    w1's answer (commit timeout 30 s). Woken (SIGCONT), w1 sends its reply and dies before it can
    rejoin (kill-after-stop). That cycle lands w1's files; w0's next reply covers the same offsets.

    Fencing on: that reply is refused inside the compare-and-swap and read again, and every offset
    is in the table once. Fencing off (``FRAZIL_FAULTS=fencing=off``: no generation check, no
    contiguity check): the same run lands records twice, so this test fails without the fencing."""
    topic = f"eos-zombie-fencing-{fencing}"
    group = eos.setup(tmp_path, kafka.bootstrap, 2, interval=0.5, timeout=30.0, partitions=4, topic=topic)
    switch = "fencing=off" if fencing == "off" else ""
    produce = _Stream(kafka.bootstrap, topic)

    try:
        group.start("w0", {"FRAZIL_FAULTS": switch})
        _wait_for(lambda: "starting the coordinator" in group.tail("w0", 50_000), "w0 to coordinate")
        group.start("w1", {"FRAZIL_FAULTS": ",".join(filter(None, [
            "worker.after_files_written=stop", "worker.after_reply=kill-after-stop", switch]))})
        # client ids order the members: w0 keeps partition 0 (the coordinator), w1 gets 1 and 3
        _wait_for(lambda: "replied to commit" in group.tail("w1", 50_000), "w1 to join and reply")
        assert f"{topic}[0]" not in group.tail("w1", 50_000), group.tail("w1")
        deadline = time.monotonic() + 60
        while not _stopped(group.procs["w1"]):   # w1 stops at its first reply with data
            assert time.monotonic() < deadline, f"w1 never stopped; tail:\n{group.tail('w1')}"
            produce(1000)
            time.sleep(0.3)
        # w0 took all four partitions once before w1 joined: wait for the next time, after w1's
        # session has expired (waking w1 earlier makes it a slow worker, not a zombie)
        took_all = group.tail("w0", 200_000).count("assigned 4 partition(s)")
        produce(2000)
        _wait_for(lambda: group.tail("w0", 200_000).count("assigned 4 partition(s)") > took_all,
                  "w0 to take w1's partitions", 30)
        time.sleep(2)   # w0 re-reads partitions 1 and 3 from the table
        group.procs["w1"].send_signal(signal.SIGCONT)
        assert group.procs["w1"].wait(timeout=30) == -signal.SIGKILL, group.tail("w1")
        del group.procs["w1"]   # dead for good: no rejoin may rescue w0's overlapping reply
        produce(2000)
        ends = asyncio.run(end_offsets(kafka.bootstrap, [topic]))
        eos.wait_committed(tmp_path, ends, group, timeout=120)
    finally:
        for proc in group.procs.values():
            proc.send_signal(signal.SIGCONT)
        group.stop_all()
    found = eos.count(tmp_path)
    result = {**eos.verdict(found["counts"], ends), "snapshots_per_cycle_max": found["snapshots_per_cycle_max"]}
    print(fencing, result)
    coordinator_log = group.tail("w0", 2_000_000)
    if fencing == "on":
        _assert_exact(result)
        assert result["rows"] == produce.produced
        # the fence fired, on the zombie's partitions (w0's own, 0 and 2, are named too when w0 had
        # landed records of them before: not so when its reply in the zombie's cycle came before any)
        refused = [line for line in coordinator_log.splitlines() if "part of it is already in the table:" in line]
        assert any(f"{topic}[1] stored=" in line or f"{topic}[3] stored=" in line for line in refused), \
            refused or [line for line in coordinator_log.splitlines() if "dropped a reply" in line or "ended (" in line]
    else:
        assert "FENCING IS OFF" in coordinator_log
        assert result["duplicates"] > 0, result


def test_a_worker_paused_inside_its_reply_transaction_holds_the_pipeline_back_only_until_the_broker_aborts_it(
        kafka: KafkaBroker, tmp_path: Path) -> None:
    """w1 stops (SIGSTOP) with its reply sent but its transaction open: every read_committed reader
    of the control topic is held at that transaction. The broker aborts it after the reply
    transaction timeout (10 s here), w0 takes w1's partitions, and commits go on. Woken, w1 finds its
    transaction gone, says so, starts a new producer, reads its partitions again and carries on
    (it does not exit). Every offset lands once."""
    topic = "eos-paused-transaction"
    group = eos.setup(tmp_path, kafka.bootstrap, 2, interval=0.5, timeout=5.0, partitions=4, topic=topic)
    produce = _Stream(kafka.bootstrap, topic)

    try:
        group.start("w0")
        _wait_for(lambda: "starting the coordinator" in group.tail("w0", 50_000), "w0 to coordinate")
        group.start("w1", {"FRAZIL_FAULTS": "worker.in_reply_transaction=stop"})
        _wait_for(lambda: _stopped(group.procs["w1"]), "w1 to stop inside a reply transaction")
        produce(4000)
        # held back while the transaction is open, then committed by w0 alone
        eos.wait_committed(tmp_path, asyncio.run(end_offsets(kafka.bootstrap, [topic])), group, timeout=90)
        group.procs["w1"].send_signal(signal.SIGCONT)
        _wait_for(lambda: "could not be sent" in group.tail("w1", 200_000), "w1 to notice its aborted reply", 60)
        _wait_for(lambda: group.tail("w1", 200_000).count("replied to commit") >= 1, "w1 to reply again", 60)
        produce(4000)
        ends = asyncio.run(end_offsets(kafka.bootstrap, [topic]))
        eos.wait_committed(tmp_path, ends, group, timeout=90)
        assert group.procs["w1"].poll() is None, group.tail("w1")
    finally:
        for proc in group.procs.values():
            proc.send_signal(signal.SIGCONT)
        codes = group.stop_all()
    found = eos.count(tmp_path)
    result = {**eos.verdict(found["counts"], ends), "snapshots_per_cycle_max": found["snapshots_per_cycle_max"]}
    print(result)
    _assert_exact(result)
    assert result["rows"] == produce.produced and codes == {"w0": 0, "w1": 0}, (result, codes)


def test_files_a_cycle_could_not_land_are_held_by_their_workers_and_land_in_a_later_cycle(kafka: KafkaBroker,
                                                                                        tmp_path: Path) -> None:
    """Rule 6 in distributed mode. Every process is armed: the coordinator's first catalog commit
    fails (one attempt allowed), so the cycle completes naming the table as failed and its workers
    keep those files; and each worker's first data files fail right after being written (as a
    storage error would), so it answers nothing that cycle and holds them. Both kinds of held files
    are reported again, with the new ones, and land in a later cycle: nothing is read again from
    Kafka, nothing is lost or doubled, nobody exits."""
    topic = "eos-held-files"
    group = eos.setup(tmp_path, kafka.bootstrap, 2, interval=0.5, timeout=3.0, partitions=4, topic=topic,
                      pipeline_extra="max_commit_attempts = 1")
    faults_spec = "commit.before_catalog=raise-once,worker.after_files_written=raise-once"
    records, chunk = 20_000, 2_000
    try:
        for name in ("w0", "w1"):
            group.start(name, {"FRAZIL_FAULTS": faults_spec})
        _wait_for(lambda: all("replied to commit" in group.tail(n, 20000) for n in ("w0", "w1")),
                  "both workers to reply")
        for c in range(records // chunk):
            asyncio.run(eos.produce(kafka.bootstrap, topic, (eos.record(i) for i in range(c * chunk, (c + 1) * chunk)),
                                    partitions=4, label=None))
            time.sleep(0.3)
        ends = asyncio.run(end_offsets(kafka.bootstrap, [topic]))
        eos.wait_committed(tmp_path, ends, group, timeout=120)
    finally:
        codes = group.stop_all()
    logs = {n: group.tail(n, 2_000_000) for n in ("w0", "w1")}
    found = eos.count(tmp_path)
    result = {**eos.verdict(found["counts"], ends), "snapshots_per_cycle_max": found["snapshots_per_cycle_max"]}
    _assert_exact(result)
    assert result["rows"] == records and codes == {"w0": 0, "w1": 0}, (result, codes)
    assert all("Holding" in text for text in logs.values()), "a worker did not hold its failed files"
    assert any("keeping its" in text for text in logs.values()), "no worker kept the files of a failed table commit"
    assert not any("reading every partition again" in text for text in logs.values()), "records were read again"


def test_a_rebalance_while_the_catalog_is_locked_waits_for_it_and_loses_nothing(kafka: KafkaBroker,
                                                                                 tmp_path: Path) -> None:
    """Found by the chaos run: partitions assigned while the catalog was locked (their offsets
    cannot be read) ended the process. Now the read is retried, loudly, until the catalog answers."""
    import sqlite3

    topic = "eos-assign-locked"
    group = eos.setup(tmp_path, kafka.bootstrap, 2, interval=0.5, timeout=5.0, partitions=4, topic=topic)
    for name in ("w0", "w1"):   # the rollback journal: a writer's lock keeps readers out (the WAL's does not)
        path = group.config(name)
        path.write_text(path.read_text().replace("[catalog]\n", '[catalog]\nsqlite_journal = "keep"\n', 1))
    produce = _Stream(kafka.bootstrap, topic)
    try:
        for name in ("w0", "w1"):
            group.start(name)
        produce(2_000)
        eos.wait_committed(tmp_path, asyncio.run(end_offsets(kafka.bootstrap, [topic])), group, timeout=60)
        lock = sqlite3.connect(tmp_path / "warehouse" / "catalog.db", timeout=30)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            survivor = "w0" if _coordinator(group) == "w1" else "w1"
            group.kill("w1" if survivor == "w0" else "w0")   # its partitions move to the survivor, whose
            del group.procs["w1" if survivor == "w0" else "w0"]   # offsets read finds the catalog locked
            _wait_for(lambda: "cannot read the tables' offsets" in group.tail(survivor, 200_000),
                      "the survivor to wait for the locked catalog", timeout=60)
            time.sleep(3)
            assert not group.exited(), group.exited()
        finally:
            lock.rollback()
            lock.close()
        produce(2_000)
        ends = asyncio.run(end_offsets(kafka.bootstrap, [topic]))
        eos.wait_committed(tmp_path, ends, group, timeout=90)
        assert not group.exited(), group.exited()
    finally:
        group.stop_all()
    found = eos.count(tmp_path)
    result = {**eos.verdict(found["counts"], ends), "snapshots_per_cycle_max": found["snapshots_per_cycle_max"]}
    _assert_exact(result)
    assert result["rows"] == 4_000, result
