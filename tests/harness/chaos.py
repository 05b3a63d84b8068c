"""The chaos run: every fault kind a deployment meets, injected at random times and at the named
fault points, several at once, into a pipeline of three tables (two append tables fed by one
topic with fan-out, schema evolution and dead letters; one upsert table with tombstones) on real
brokers and a real catalog with Spark maintenance on; then an independent verifier. The
deployment: the catalog (SQLite, or PostgreSQL on a server the run restarts), the mode (three
processes in distributed mode, or one in single mode) and the brokers (one, or a cluster of three).

    PYTHONPATH=tests:dev python -m harness.chaos [--faults 500] [--seed N] [--catalog postgresql]
        [--mode single] [--brokers 3]   # make chaos CHAOS_ARGS="..."

Seeded: the seed picks every fault, its time, its victim and the data, so a failing run replays
(timing on a busy machine still varies; the seed is printed first and kept in the report). The
verifier trusts neither frazil's counters nor its offsets: it reads both topics back from the
broker, classifies every record itself, and compares with every table read by pyiceberg and by
Spark SQL, and with the dead-letter topic read with read_committed. Writes
``benches/results/chaos-<catalog>-<mode>-<brokers>b.json`` with the commit it ran. The pipeline's
processes run a copy of the ``frazil`` package taken when the run begins (``<dir>/src``): the
report is of one version, whatever is edited meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import frazil
from frazil import faults as fault_points
from frazil.config import CatalogConfig
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg import offsets
from frazil.status import end_offsets
from frazil_dev.fault_proxy import FaultProxy
from frazil_dev.kafka_broker import KafkaBroker, KafkaCluster
from frazil_dev.postgres import PostgresServer
from frazil_dev.rest_catalog import RestCatalogServer
from frazil_dev.s3 import S3Server
from frazil_dev.workload import create_topic
from support import close_catalog, toml_table

log = logging.getLogger("chaos")

PIPELINE = "chaos"
EVENTS, CHANGES = "chaos-events", "chaos-changes"
PARTITIONS = 4
KEYS = 100_000   # the upsert table's keys, every one inserted first, then changed at random
PRELOAD_PER_TICK = 10_000   # of those first inserts, with each chunk until every key has one
DEAD_LETTERS = f"frazil-dead-letters-{PIPELINE}"
TABLES = {"chaos.events": EVENTS, "chaos.big": EVENTS, "chaos.state": CHANGES}
WORKERS = ("w0", "w1", "w2")   # distributed mode's; single mode runs one process, "s0"
MODES = ("distributed", "single")
SESSION_TIMEOUT_S = 3.0

KINDS = {   # kind: weight
    "kill_worker": 3, "kill_coordinator": 2, "kill_at_point": 3, "zombie_worker": 2, "zombie_coordinator": 2,
    "broker_restart": 1, "catalog_locked": 2, "catalog_unreachable": 2, "compaction": 2, "expiry": 1,
    "bad_records": 2, "schema_change": 1, "rebalance_storm": 1,
}
SERVER_KINDS = {"catalog_restart": 1}   # where the catalog is a server of its own: it is stopped and started
STORE_KINDS = {"s3_errors": 1, "s3_slow": 1}   # where the warehouse is in object storage (behind a fault proxy)
EXCLUSIVE = {"broker_restart", "catalog_locked", "catalog_restart", "compaction", "expiry",
             "rebalance_storm", "s3_errors", "s3_slow"}  # one at a time
CATALOGS = ("sqlite", "postgresql", "rest")   # rest: Iceberg's REST fixture, its warehouse on S3 (moto's)
NOT_SINGLE = {"kill_worker", "zombie_worker"}   # single mode has no process that is only a worker


def kinds_of(catalog: str, mode: str = "distributed") -> dict[str, int]:
    """The fault kinds (and their weights) of a run on ``catalog`` in ``mode``."""
    kinds = {**KINDS, **(SERVER_KINDS if catalog != "sqlite" else {}), **(STORE_KINDS if catalog == "rest" else {})}
    return {k: w for k, w in kinds.items() if not (mode == "single" and k in NOT_SINGLE)}


def workers_of(mode: str) -> tuple[str, ...]:
    return WORKERS if mode == "distributed" else ("s0",)
KILL_POINTS = tuple(p for p in fault_points.POINTS if not p.startswith("merge."))
STOP_POINTS = {"coordinator": ("coordinator.after_start_commit", "commit.after_catalog",
                               "coordinator.after_catalog_commits", "coordinator.after_commit_complete",
                               "dead_letter.before_commit"),
               "worker": ("worker.after_files_written", "worker.before_reply", "worker.in_reply_transaction")}

CONFIG = """\
[pipeline]
name = "{pipeline}"
commit_interval_s = 1.0
txlog_dir = "{workdir}/txlog/{worker}"
on_bad_record = "dead_letter"
outage_timeout_s = 900
log_level = "INFO"

[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{events}", "{changes}"]
client_id = "{pipeline}-{worker}"
session_timeout_ms = {session_ms}
heartbeat_interval_ms = 500

[catalog]
properties = {catalog_properties}

[coordination]
mode = "{mode}"
commit_timeout_s = 2.5

[maintenance]
enabled = {maintenance}
interval_s = 45
max_snapshots = 60
max_delete_files = 24
min_input_files = 3
snapshot_max_age_s = 300

[spark]
master = "local[1]"
conf = {{ "spark.driver.memory" = "768m" }}

[[tables]]
name = "chaos.events"
topics = "{events}"
unknown_fields = "evolve"
columns = {event_columns}

[[tables]]
name = "chaos.big"
topics = "{events}"
route_field = "kind"
route = "big"
unknown_fields = "evolve"
columns = {event_columns}

[[tables]]
name = "chaos.state"
topics = "{changes}"
mode = "upsert"
identifier_columns = ["id"]
tombstones = "delete"
columns = [
  {{ name = "id", type = "long", required = true }},
  {{ name = "name", type = "string" }},
  {{ name = "amount", type = "double" }},
  {{ name = "version", type = "long" }},
]
"""


EVENT_COLUMNS = """[
  { name = "id", type = "long", required = true },
  { name = "name", type = "string" },
  { name = "kind", type = "string" },
]"""


class ChaosError(RuntimeError):
    """The run found a failure (a process that exited by itself, no recovery, a wrong table)."""


# -- processes --------------------------------------------------------------------------------

@dataclass
class Proc:
    """One incarnation of a ``frazil run`` process, and what its log has said so far."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    started: float
    pos: int = 0
    leading: bool = False
    armable: bool = False
    injected: int = 0    # "injected fault at" lines
    working: bool = False   # it has replied to a commit
    lock: threading.Lock = field(default_factory=threading.Lock)   # scanned from several fault threads

    def alive(self) -> bool:
        return self.popen.poll() is None

    def send(self, sig: int) -> None:
        try:
            self.popen.send_signal(sig)
        except ProcessLookupError:
            pass

    def stopped(self) -> bool:
        try:
            return Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
        except (OSError, IndexError):
            return False

    def scan(self) -> None:
        """Read what the log says since the last scan (whole lines only)."""
        with self.lock:
            self._scan()

    def _scan(self) -> None:
        try:
            with open(self.log, "rb") as f:
                f.seek(self.pos)
                chunk = f.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1
        self.pos += end
        for line in chunk[:end].splitlines():
            if b"starting the coordinator" in line:
                self.leading = True
            elif b"stopping the coordinator" in line:
                self.leading = False
            elif b"SIGUSR1 re-arms" in line:
                self.armable = True
            if b"replied to commit" in line:
                self.working = True
            if b"injected fault at" in line:
                self.injected += 1


def start_failed(proc: Proc) -> bool:
    """The process could not reach Kafka or the catalog while starting (another fault's outage) and
    exited as documented: status 3 or 4, before it ever replied to a commit. Killed instead by the
    SIGUSR1 this runner sent to arm a fault point, or by a rebalance storm's SIGTERM, while it was
    already on that way out (the event loop that handles the signal had ended, so the signal's
    default action ran): the same, when its last line says so."""
    proc.scan()
    code = proc.popen.returncode
    if proc.working or code is None:
        return False
    if code in (3, 4):
        return True
    tail = proc.log.read_text(errors="replace")[-2000:]
    return code in (-signal.SIGUSR1, -signal.SIGTERM) and ("frazil: KafkaUnavailable" in tail
                                                           or "frazil: CatalogUnavailable" in tail)


@dataclass
class RestStack:
    """A REST catalog of the run's own (Apache Iceberg's REST fixture, on a SQLite file) whose
    warehouse is on an S3 server (moto's), reached by every client, the catalog server too, through
    a proxy that fails or slows on demand."""

    s3: S3Server
    proxy: FaultProxy
    server: RestCatalogServer
    storage: dict[str, str]   # the warehouse and S3 settings every client uses: the bucket through the proxy

    @classmethod
    @contextlib.contextmanager
    def start(cls, workdir: Path, bucket: str = "chaos") -> Iterator[RestStack]:
        with contextlib.ExitStack() as stack:
            s3 = stack.enter_context(S3Server.start(workdir / "s3"))
            proxy = stack.enter_context(FaultProxy.start(s3.port))
            storage = {**s3.catalog_properties(bucket), "s3.endpoint": proxy.endpoint}   # creates the bucket
            server = stack.enter_context(RestCatalogServer.start(workdir / "rest", properties=storage))
            yield cls(s3, proxy, server, storage)

    def properties(self) -> dict[str, str]:
        """The pipeline's ``[catalog]`` properties: the server, and the warehouse through the proxy."""
        return {"type": "rest", "uri": self.server.uri, **self.storage}


@dataclass
class Site:
    """Where the tables live: the catalog (SQLite in the run's folder, a database of its own on a
    PostgreSQL server, or a REST catalog on S3) and the faults only the catalog can have."""

    kind: str
    properties: dict[str, str]
    postgres: PostgresServer | None = None
    rest: RestStack | None = None
    # a lock on the catalog and its server's restart, one at a time: a lock needs the server up
    server_faults: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def make(cls, kind: str, workdir: Path, seed: int, postgres: PostgresServer | None,
             rest: RestStack | None = None) -> Site:
        warehouse = f"file://{workdir}/warehouse"
        if kind == "sqlite":
            return cls(kind, {"uri": f"sqlite:///{workdir}/warehouse/catalog.db", "warehouse": warehouse})
        if kind == "postgresql":
            if postgres is None:
                raise ChaosError("a run on the PostgreSQL catalog needs a PostgreSQL server")
            uri = postgres.create_database(f"chaos_{seed}_{time.monotonic_ns() % 1_000_000}")
            return cls(kind, {"uri": uri, "warehouse": warehouse}, postgres)
        if kind == "rest":
            if rest is None:
                raise ChaosError("a run on the REST catalog needs its server and S3 (RestStack)")
            return cls(kind, rest.properties(), rest=rest)
        raise ChaosError(f"unknown catalog {kind!r}: one of {', '.join(CATALOGS)}")

    def config(self) -> CatalogConfig:
        return CatalogConfig("frazil", {"type": "sql", **self.properties})

    def toml(self) -> str:
        return toml_table(self.properties)

    def restart(self, down: float, *, kill: bool) -> None:
        """Stop the catalog's server and start it again ``down`` seconds later: commits in flight
        lose their connection (an unknown outcome)."""
        with self.server_faults:
            if self.rest is not None:
                self.rest.server.restart(down, kill=kill)
            else:
                assert self.postgres is not None
                self.postgres.restart(down, kill=kill)

    def lock(self, hold: float) -> None:
        """Hold the catalog's table of tables locked for ``hold`` seconds: every commit waits (the
        REST catalog's server fails them: its own catalog is a SQLite file)."""
        if self.postgres is None:
            path = (str(self.rest.server.workdir / "rest-catalog.db") if self.rest is not None
                    else self.properties["uri"].removeprefix("sqlite:///"))
            with self.server_faults:
                db = sqlite3.connect(path, timeout=60)
                try:
                    db.execute("BEGIN EXCLUSIVE")
                    time.sleep(hold)
                    db.rollback()
                finally:
                    db.close()
            return
        import psycopg

        dsn = self.properties["uri"].replace("postgresql+psycopg://", "postgresql://")
        with self.server_faults, psycopg.connect(dsn) as conn:
            conn.execute("LOCK TABLE iceberg_tables IN ACCESS EXCLUSIVE MODE")   # in the connection's transaction
            time.sleep(hold)
            conn.rollback()


class Procs:
    """The pipeline's processes: each name restartable, each incarnation with its own log."""

    def __init__(self, workdir: Path, bootstrap: str, site: Site, *, maintenance: bool, mode: str) -> None:
        self.workdir, self.bootstrap, self.site, self.maintenance = workdir, bootstrap, site, maintenance
        self.mode, self.workers = mode, workers_of(mode)
        self.current: dict[str, Proc] = {}
        self.incarnations: Counter[str] = Counter()
        self.lock = threading.RLock()
        self.start_failures = 0
        # the processes run frazil as it was when the run began: a copy, so that one restarted
        # mid-run does not pick up an edit to the working tree (the report is of one version)
        frozen = workdir / "src"
        shutil.copytree(Path(frazil.__file__).parent, frozen / "frazil", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
        path = os.pathsep.join(p for p in (str(frozen), os.environ.get("PYTHONPATH", "")) if p)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}

    def config(self, name: str) -> Path:
        path = self.workdir / f"{name}.toml"
        if not path.exists():
            path.write_text(CONFIG.format(pipeline=PIPELINE, workdir=self.workdir, worker=name,
                                          bootstrap=self.bootstrap, events=EVENTS, changes=CHANGES,
                                          session_ms=int(SESSION_TIMEOUT_S * 1000),
                                          catalog_properties=self.site.toml(), mode=self.mode,
                                          maintenance=str(self.maintenance).lower(), event_columns=EVENT_COLUMNS))
        return path

    def start(self, name: str) -> Proc:
        with self.lock:
            self.incarnations[name] += 1
            logfile = self.workdir / "logs" / f"{name}.{self.incarnations[name]}.log"
            logfile.parent.mkdir(parents=True, exist_ok=True)
            spec = self.workdir / f"faults-{name}"
            spec.write_text("")
            with open(logfile, "wb") as out:
                popen = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config",
                                          str(self.config(name))],
                                         stdout=out, stderr=subprocess.STDOUT,
                                         env={**self.env, fault_points.FILE_ENV: str(spec)})
            proc = Proc(name, popen, logfile, time.monotonic())
            self.current[name] = proc
            return proc

    def live(self) -> list[Proc]:
        """The pipeline's own processes that run (not a rebalance storm's)."""
        with self.lock:
            return [p for n, p in self.current.items() if n in self.workers and p.alive()]

    def scan(self) -> None:
        with self.lock:
            for proc in self.current.values():
                proc.scan()

    def coordinator(self) -> Proc | None:
        """The live process that runs the coordinator now (from its log), if any says so."""
        self.scan()
        leading = [p for p in self.live() if p.leading or self.mode == "single"]   # single: each its own
        return leading[-1] if leading else None

    def arm(self, proc: Proc, spec: str) -> bool:
        """Arm ``spec`` in a running process (False: not armable yet, or gone)."""
        proc.scan()
        if not proc.armable or not proc.alive():
            return False
        (self.workdir / f"faults-{proc.name}").write_text(spec)
        proc.send(signal.SIGUSR1)
        return True

    def injected(self) -> int:
        self.scan()
        with self.lock:
            return sum(p.injected for p in self.current.values())

    def supervise(self, restarted: Callable[[str], None]) -> None:
        """Restart every worker a SIGKILL ended, and, as systemd's ``Restart=on-failure`` does, one
        that could not reach Kafka or the catalog while starting (exit 3 or 4: a broker restart or a
        catalog lock under another fault) and had not worked yet. A process that worked and then
        exits by itself is a failure of the run."""
        with self.lock:
            for name in self.workers:
                proc = self.current.get(name)
                if proc is None or proc.alive():
                    continue
                if start_failed(proc):
                    self.start_failures += 1
                elif proc.popen.returncode != -signal.SIGKILL:
                    raise ChaosError(f"{name} exited by itself (code {proc.popen.returncode}); its log {proc.log}:\n"
                                     f"{proc.log.read_text(errors='replace')[-4000:]}")
                self.start(name)
                restarted(name)

    def stop_all(self, timeout: float = 90) -> dict[str, int]:
        """SIGTERM to every process and their exit codes; one that had already ended because it
        could not start under another fault's outage (``start_failed``, judged as ``supervise`` and
        the rebalance storm judge it) is not counted."""
        with self.lock:
            procs = [p for p in self.current.values() if p.alive() or not start_failed(p)]
        for proc in procs:
            proc.send(signal.SIGCONT)
            proc.send(signal.SIGTERM)
        codes = {}
        for proc in procs:
            try:
                codes[proc.name] = proc.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                codes[proc.name] = proc.popen.wait()
        return codes


# -- the producer -----------------------------------------------------------------------------

class Producer(threading.Thread):
    """Streams both topics until stopped: events (ids in order, one in three ``kind = "big"``, the
    field the latest schema change added) and upserts of ``keys`` keys (each key in one partition,
    one in ten a tombstone): every key inserted first, ``PRELOAD_PER_TICK`` a chunk, while random
    changes go on over those keys and a tenth more (new keys). Bad records and schema changes are
    asked for by faults and go out with the next chunk. A chunk that fails (broker down) is sent
    again: the topic, read back, is the truth the verifier uses, so a record the broker took twice
    is two records."""

    def __init__(self, bootstrap: str, seed: int, *, events: int, changes: int, tick_s: float,
                 keys: int = KEYS) -> None:
        super().__init__(name="producer", daemon=True)
        self.bootstrap, self.rng = bootstrap, random.Random(seed)
        self.events_per_tick, self.changes_per_tick, self.tick_s = events, changes, tick_s
        self.keys, self.preloaded = keys, 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.bad_wanted = 0
        self.field: str | None = None
        self.fields_added = 0
        self.sent_chunks = 0
        self.failures = 0
        self.next_id = 0
        self.version = 0
        self.error: BaseException | None = None
        self.sent = threading.Condition()

    def ask_bad(self, n: int) -> int:
        with self.lock:
            self.bad_wanted += n
        return self.wait_chunk()

    def change_schema(self) -> str:
        with self.lock:
            self.fields_added += 1
            self.field = f"x{self.fields_added}"
            name = self.field
        self.wait_chunk()
        return name

    def wait_chunk(self, timeout: float = 120) -> int:
        with self.sent:
            seen = self.sent_chunks
            self.sent.wait_for(lambda: self.sent_chunks > seen + 1 or self.error is not None, timeout=timeout)
            return self.sent_chunks

    def _chunk(self) -> list[tuple[str, int, bytes | None, bytes | None]]:
        out: list[tuple[str, int, bytes | None, bytes | None]] = []
        with self.lock:
            bad, self.bad_wanted = self.bad_wanted, 0
            extra = self.field
        for _ in range(self.events_per_tick):
            i = self.next_id
            self.next_id += 1
            value: dict[str, Any] = {"id": i, "name": f"n{i}", "kind": "big" if i % 3 == 0 else "small"}
            if extra is not None:
                value[extra] = f"{extra}-{i}"
            out.append((EVENTS, i % PARTITIONS, None, json.dumps(value).encode()))
        for b in range(bad):
            where = self.rng.randrange(len(out) + 1)
            token = f"{self.next_id}-{b}"
            value_bytes = (f"not json {token}".encode() if self.rng.random() < 0.5
                           else json.dumps({"id": f"bad-{token}", "name": "bad"}).encode())
            out.insert(where, (EVENTS, self.rng.randrange(PARTITIONS), None, value_bytes))
        first = range(self.preloaded, min(self.keys, self.preloaded + PRELOAD_PER_TICK))
        self.preloaded = first.stop
        changed = [self.rng.randrange(self.keys + self.keys // 10) for _ in range(self.changes_per_tick)]
        for key in [*first, *changed]:
            self.version += 1
            tomb = key not in first and self.rng.random() < 0.1
            value_bytes = None if tomb else json.dumps({"id": key, "name": f"k{key}v{self.version}",
                                                        "amount": round(self.rng.random() * 1000, 2),
                                                        "version": self.version}).encode()
            out.append((CHANGES, key % PARTITIONS, str(key).encode(), value_bytes))
        return out

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported by the runner
            self.error = exc
            with self.sent:
                self.sent.notify_all()

    async def _main(self) -> None:
        from aiokafka import AIOKafkaProducer

        producer: AIOKafkaProducer | None = None
        chunk: list[tuple[str, int, bytes | None, bytes | None]] = []
        while not self.stopping.is_set():
            if not chunk:
                chunk = self._chunk()
            try:
                if producer is None:
                    producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True,
                                                linger_ms=5, request_timeout_ms=15000)
                    await producer.start()
                futures = [await producer.send(t, v, key=k, partition=p) for t, p, k, v in chunk]
                await asyncio.gather(*futures)
            except Exception as exc:  # noqa: BLE001 - the broker is down or restarting: send the chunk again
                self.failures += 1
                log.info("producer: %s; sending the chunk again", type(exc).__name__)
                if producer is not None:
                    try:
                        await producer.stop()
                    except Exception:  # noqa: BLE001
                        pass
                producer = None
                await asyncio.sleep(1.0)
                continue
            chunk = []
            with self.sent:
                self.sent_chunks += 1
                self.sent.notify_all()
            await asyncio.sleep(self.tick_s)
        if producer is not None:
            await producer.stop()


# -- faults -----------------------------------------------------------------------------------

@dataclass
class Fault:
    kind: str
    detail: str
    started: float
    ended: float = 0.0
    counted: bool = True          # False: armed but never reached, so not a fault that happened
    target: dict[tuple[str, int], int] = field(default_factory=dict)
    recovered: float | None = None


class Chaos:
    """The fault injector: each fault runs in its own thread, several at once."""

    def __init__(self, workdir: Path, broker: KafkaBroker | KafkaCluster, procs: Procs, producer: Producer,
                 rng: random.Random, site: Site, spark: Callable[[], Any]) -> None:
        self.workdir, self.broker, self.procs, self.producer, self.rng = workdir, broker, procs, producer, rng
        self.site, self.spark = site, spark
        self.kinds = kinds_of(site.kind, procs.mode)
        self.busy: set[str] = set()
        self.lock = threading.Lock()
        self.first = rng.sample(sorted(self.kinds), len(self.kinds))
        self.extra = 0

    def pick(self, short: list[str] | None = None) -> str:
        """The next kind: each once first, in a seeded order; then drawn by weight (from ``short``,
        the kinds still below their minimum, once the fault count is reached)."""
        with self.lock:
            first = [k for k in self.first if not (k in EXCLUSIVE and k in self.busy)]
            if first:   # every kind once, in a seeded order, before the weighted draw
                self.first.remove(first[0])
                self.busy.add(first[0])
                return first[0]
            free = [k for k in self.kinds if not (k in EXCLUSIVE and k in self.busy)]
            kinds = [k for k in free if k in (short or ())] or free
            kind = self.rng.choices(kinds, weights=[self.kinds[k] for k in kinds])[0]
            self.busy.add(kind)
            return kind

    def done(self, kind: str) -> None:
        with self.lock:
            self.busy.discard(kind)

    def run(self, kind: str, fault_rng: random.Random) -> Fault:
        fault = Fault(kind, "", time.monotonic())
        try:
            fault.detail = getattr(self, kind)(fault_rng, fault) or ""
        finally:
            fault.ended = time.monotonic()
            self.done(kind)
        return fault

    def _victim(self, rng: random.Random, *, coordinator: bool) -> Proc | None:
        lead = self.procs.coordinator()
        if coordinator:
            return lead
        others = [p for p in self.procs.live() if p is not lead]
        return rng.choice(others) if others else None

    def _kill(self, rng: random.Random, fault: Fault, *, coordinator: bool) -> str:
        victim = self._victim(rng, coordinator=coordinator)
        if victim is None:
            fault.counted = False
            return "no coordinator to kill" if coordinator else "no worker but the coordinator"
        victim.send(signal.SIGKILL)
        return f"SIGKILL {victim.name}{' (the coordinator)' if coordinator else ''}"

    def kill_worker(self, rng: random.Random, fault: Fault) -> str:
        return self._kill(rng, fault, coordinator=False)

    def kill_coordinator(self, rng: random.Random, fault: Fault) -> str:
        return self._kill(rng, fault, coordinator=True)

    def kill_at_point(self, rng: random.Random, fault: Fault) -> str:
        point = rng.choice(KILL_POINTS)
        live = self.procs.live()
        if point.startswith(("worker.", "txlog.")) and live:   # every process reaches these: one victim
            live = [rng.choice(live)]
        armed = [p for p in live if self.procs.arm(p, f"{point}=kill")]
        deadline = time.monotonic() + 15
        dead: list[Proc] = []
        while time.monotonic() < deadline and not dead:
            time.sleep(0.1)
            dead = [p for p in armed if not p.alive()]
        for proc in armed:
            if proc.alive():
                self.procs.arm(proc, "")
        if not dead:
            fault.counted = False
            return f"{point}: not reached in 15 s"
        return f"{point}: {', '.join(p.name for p in dead)} died there"

    def _zombie(self, rng: random.Random, fault: Fault, *, coordinator: bool) -> str:
        victim = self._victim(rng, coordinator=coordinator)
        if victim is None:
            fault.counted = False
            return "no victim"
        how = "at a random time"
        if rng.random() < 0.5:
            point = rng.choice(STOP_POINTS["coordinator" if coordinator else "worker"])
            if self.procs.arm(victim, f"{point}=stop"):
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and not victim.stopped() and victim.alive():
                    time.sleep(0.05)
                if not victim.stopped():
                    self.procs.arm(victim, "")
                    fault.counted = False
                    return f"{victim.name}: {point} not reached in 10 s"
                how = f"at {point}"
        if not victim.stopped():
            victim.send(signal.SIGSTOP)
        pause = SESSION_TIMEOUT_S + rng.uniform(1.0, 5.0)
        time.sleep(pause)
        victim.send(signal.SIGCONT)
        return f"SIGSTOP {victim.name}{' (the coordinator)' if coordinator else ''} {how} for {pause:.1f}s"

    def zombie_worker(self, rng: random.Random, fault: Fault) -> str:
        return self._zombie(rng, fault, coordinator=False)

    def zombie_coordinator(self, rng: random.Random, fault: Fault) -> str:
        return self._zombie(rng, fault, coordinator=True)

    def broker_restart(self, rng: random.Random, fault: Fault) -> str:
        down = rng.uniform(1.0, 10.0)
        crash = rng.random() < 0.3
        self.broker.restart(down, kill=crash)   # a cluster's: one node, its partitions' leaders move
        return f"{'SIGKILL' if crash else 'SIGTERM'}, down {down:.1f}s"

    def catalog_locked(self, rng: random.Random, fault: Fault) -> str:
        hold = rng.uniform(1.0, 8.0)
        self.site.lock(hold)
        return f"exclusive lock for {hold:.1f}s"

    def catalog_restart(self, rng: random.Random, fault: Fault) -> str:
        down = rng.uniform(1.0, 10.0)
        crash = rng.random() < 0.5
        self.site.restart(down, kill=crash)
        server = "the REST catalog" if self.site.rest is not None else "PostgreSQL"
        return f"{server} {'SIGKILL' if crash else 'stopped'}, down {down:.1f}s"

    def s3_errors(self, rng: random.Random, fault: Fault) -> str:
        assert self.site.rest is not None
        proxy = self.site.rest.proxy
        seconds = rng.uniform(1.0, 8.0)
        refused, cut = proxy.refused, proxy.cut
        proxy.fail(seconds)
        time.sleep(seconds)
        return (f"S3 failing for {seconds:.1f}s: {proxy.cut - cut} connection(s) cut, "
                f"{proxy.refused - refused} request(s) answered 503 SlowDown")

    def s3_slow(self, rng: random.Random, fault: Fault) -> str:
        assert self.site.rest is not None
        seconds, delay = rng.uniform(2.0, 10.0), rng.uniform(0.2, 2.0)
        self.site.rest.proxy.slow(seconds, delay)
        time.sleep(seconds)
        return f"S3 slow for {seconds:.1f}s: every response held {delay:.1f}s"

    def catalog_unreachable(self, rng: random.Random, fault: Fault) -> str:
        point = rng.choice(("commit.before_catalog", "commit.after_catalog"))
        times = rng.randint(1, 8)
        before = self.procs.injected()
        armed = [p for p in self.procs.live() if self.procs.arm(p, f"{point}=raise*{times}")]
        time.sleep(rng.uniform(2.0, 6.0))
        for proc in armed:
            self.procs.arm(proc, "")
        hits = self.procs.injected() - before
        if hits == 0:
            fault.counted = False
        return f"{point} failing (raise*{times}) in {len(armed)} process(es): {hits} commit attempt(s) failed"

    def _spark_call(self, sql: str) -> str:
        try:
            spark = self.spark()
            # this thread's JVM thread has no active session: Iceberg's SQL parser asks for one
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            rows = spark.sql(sql).collect()
            return ", ".join(f"{k}={v}" for k, v in rows[0].asDict().items()) if rows else "done"
        except Exception as exc:  # noqa: BLE001 - a maintenance job losing to a commit is allowed
            java = getattr(exc, "java_exception", None)   # py4j's: its message alone says only "calling o61.sql"
            if java is None:
                return f"failed: {str(exc).strip().splitlines()[0][:300]}"
            causes = [str(java.toString())]
            while java.getCause() is not None and len(causes) < 4:   # the root cause says why
                java = java.getCause()
                causes.append(str(java.toString()))
            return "failed: " + " <- ".join(c.strip().splitlines()[0][:200] for c in causes)

    def compaction(self, rng: random.Random, fault: Fault) -> str:
        table = rng.choice(tuple(TABLES))
        job = rng.choice(("rewrite_data_files", "rewrite_position_delete_files", "rewrite_manifests"))
        extra = ", options => map('min-input-files', '2')" if job == "rewrite_data_files" else ""
        return f"{job} {table}: " + self._spark_call(f"CALL frazil.system.{job}(table => 'frazil.{table}'{extra})")

    def expiry(self, rng: random.Random, fault: Fault) -> str:
        table = rng.choice(tuple(TABLES))
        keep = rng.randint(1, 5)
        return f"expire_snapshots {table} retain_last {keep}: " + self._spark_call(
            f"CALL frazil.system.expire_snapshots(table => 'frazil.{table}', "
            f"older_than => current_timestamp(), retain_last => {keep})")

    def bad_records(self, rng: random.Random, fault: Fault) -> str:
        n = rng.randint(1, 5)
        self.producer.ask_bad(n)
        return f"{n} bad record(s)"

    def schema_change(self, rng: random.Random, fault: Fault) -> str:
        return f"records now carry field {self.producer.change_schema()}"

    def rebalance_storm(self, rng: random.Random, fault: Fault) -> str:
        waves = rng.randint(2, 4)
        steps = []
        for _ in range(waves):
            self.extra += 1
            name = f"x{self.extra % 3}"
            proc = self.procs.start(name)
            deadline = time.monotonic() + 60   # up: its signal handlers are in place (a SIGTERM before
            while time.monotonic() < deadline and proc.alive() and not proc.armable:   # that is Python's default)
                time.sleep(0.1)
                proc.scan()
            time.sleep(rng.uniform(0.2, 3.0))
            if rng.random() < 0.5:
                proc.send(signal.SIGKILL)
                code = proc.popen.wait()
                if code == -signal.SIGKILL:
                    steps.append(f"{name} killed")
                elif start_failed(proc):   # it had ended before the kill: could not start under another fault
                    self.procs.start_failures += 1
                    steps.append(f"{name} could not start (exit {code}: another fault's outage)")
                else:
                    raise ChaosError(f"{name} exited by itself (code {code}) before its SIGKILL; its log {proc.log}:\n"
                                     f"{proc.log.read_text(errors='replace')[-4000:]}")
                continue
            proc.send(signal.SIGTERM)
            try:
                code = proc.popen.wait(timeout=120)
            except subprocess.TimeoutExpired:
                raise ChaosError(f"{name} did not stop within 120 s of SIGTERM; its log {proc.log}") from None
            if start_failed(proc):   # could not reach Kafka or the catalog while starting
                self.procs.start_failures += 1
                steps.append(f"{name} could not start (exit {code}: another fault's outage)")
            elif code != 0:
                raise ChaosError(f"{name} exited {code} after SIGTERM; its log {proc.log}:\n"
                                 f"{proc.log.read_text(errors='replace')[-4000:]}")
            else:
                steps.append(f"{name} stopped")
        return "; ".join(steps)


# -- the independent verifier -----------------------------------------------------------------

Key = tuple[str, int, int]


async def read_topic(bootstrap: str, topic: str, *, committed: bool = False) -> list[Any]:
    """Every record of ``topic`` (read_committed for a transactional topic)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level="read_committed" if committed else "read_uncommitted",
                                max_partition_fetch_bytes=8 << 20)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic)
                                                         or await _partitions(consumer, topic))]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        out: list[Any] = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=2000, max_records=50000)).values():
                out.extend(records)
        return out
    finally:
        await consumer.stop()


async def _partitions(consumer: Any, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()   # a fresh consumer knows no topic yet
    return consumer.partitions_for_topic(topic) or set()


def classify(value: bytes | None) -> dict[str, Any] | None:
    """A source event as the table must hold it, or None for a bad record (the two kinds the
    producer makes: not JSON, or an id that is not a number)."""
    try:
        v = json.loads(value or b"")
    except ValueError:
        return None
    if not isinstance(v, dict) or not isinstance(v.get("id"), int):
        return None
    return v


def expected(events: list[Any], changes: list[Any]) -> dict[str, Any]:
    rows: dict[Key, dict[str, Any]] = {}
    bad: set[Key] = set()
    for r in events:
        k = (r.topic, r.partition, r.offset)
        v = classify(r.value)
        if v is None:
            bad.add(k)
        else:
            rows[k] = v
    latest: dict[int, tuple[tuple[int, int], tuple[str, float, int] | None]] = {}
    for r in changes:
        key = int(r.key)
        at = (r.partition, r.offset)
        new = None
        if r.value is not None:
            v = json.loads(r.value)
            new = (v["name"], v["amount"], v["version"])
        if key not in latest or latest[key][0] < at:
            latest[key] = (at, new)
    big = {k: v for k, v in rows.items() if v.get("kind") == "big"}
    state = {k: new for k, (_, new) in latest.items() if new is not None}
    fields = sorted({f for v in rows.values() for f in v if f.startswith("x")})
    return {"chaos.events": rows, "chaos.big": big, "bad": bad, "state": state, "fields": fields}


def compare_append(data: Any, want: dict[Key, dict[str, Any]], fields: list[str]) -> dict[str, Any]:
    """``data``: an Arrow table of a table's rows. Counts every (topic, partition, offset) and
    checks each row's values against the record it came from."""
    cols = data.to_pydict()
    keys = list(zip(cols["_kafka_topic"], cols["_kafka_partition"], cols["_kafka_offset"], strict=True))
    counts = Counter(keys)
    wrong = []
    names = ["id", "name", "kind", *fields]
    for i, k in enumerate(keys):
        src = want.get(k)
        if src is None:
            continue
        for c in names:
            got = cols[c][i] if c in cols else None
            if got != src.get(c):
                wrong.append((k, c, got, src.get(c)))
                break
    missing_columns = [c for c in fields if c not in cols]
    return {"rows": len(keys), "lost": len(set(want) - set(counts)),
            "duplicates": sum(n - 1 for n in counts.values() if n > 1), "unexpected": len(set(counts) - set(want)),
            "wrong_values": len(wrong), "wrong_examples": [str(w) for w in wrong[:3]],
            "missing_columns": missing_columns,
            "lost_examples": [str(k) for k in sorted(set(want) - set(counts))[:3]]}


def compare_state(data: Any, want: dict[int, tuple[str, float, int]]) -> dict[str, Any]:
    cols = data.to_pydict()
    ids = cols["id"]
    counts = Counter(ids)
    rows = list(zip(ids, zip(cols["name"], cols["amount"], cols["version"], strict=True), strict=True))
    stale = [(k, row, want[k]) for k, row in rows if k in want and row != want[k]]   # every row, twice-held keys too
    return {"rows": len(ids), "keys_twice": sum(n - 1 for n in counts.values() if n > 1),
            "lost": len(set(want) - set(counts)), "unexpected": len(set(counts) - set(want)),
            "stale": len(stale), "stale_examples": [str(x) for x in stale[:3]]}


def verify(bootstrap: str, catalog_cfg: CatalogConfig, spark: Any) -> dict[str, Any]:
    """Every table by both engines, the dead-letter topic, and the stored offsets."""
    started = time.monotonic()
    events = asyncio.run(read_topic(bootstrap, EVENTS))
    changes = asyncio.run(read_topic(bootstrap, CHANGES))
    letters = asyncio.run(read_topic(bootstrap, DEAD_LETTERS, committed=True))
    want = expected(events, changes)
    ends = asyncio.run(end_offsets(bootstrap, [EVENTS, CHANGES]))
    catalog = iceberg_catalog.load(catalog_cfg)
    try:
        return _verify(catalog, spark, events, changes, letters, want, ends, started)
    finally:
        close_catalog(catalog)


def _verify(catalog: Any, spark: Any, events: list[Any], changes: list[Any], letters: list[Any], want: dict[str, Any],
            ends: dict[tuple[str, int], int], started: float) -> dict[str, Any]:
    report: dict[str, Any] = {"produced": len(events) + len(changes), "bad_produced": len(want["bad"]),
                              "fields_added": want["fields"], "engines": {}}
    for engine in ("pyiceberg", "spark"):
        per: dict[str, Any] = {}
        for table in ("chaos.events", "chaos.big"):
            if engine == "pyiceberg":
                data = catalog.load_table(table).scan().to_arrow()
            else:
                data = spark_read(spark, f"frazil.{table}", "*")
            per[table] = compare_append(data, want[table], want["fields"])
        if engine == "pyiceberg":
            state = catalog.load_table("chaos.state").scan(
                selected_fields=("id", "name", "amount", "version")).to_arrow()
        else:
            state = spark_read(spark, "frazil.chaos.state", "id, name, amount, version")
        per["chaos.state"] = compare_state(state, want["state"])
        report["engines"][engine] = per
    sources = Counter()
    for r in letters:
        h = {k: v.decode() for k, v in r.headers}
        sources[(h.get("frazil.source.topic"), int(h.get("frazil.source.partition", -1)),
                 int(h.get("frazil.source.offset", -1)))] += 1
    report["dead_letters"] = {"records": len(letters), "lost": len(want["bad"] - set(sources)),
                              "duplicates": sum(n - 1 for n in sources.values() if n > 1),
                              "unexpected": len(set(sources) - want["bad"])}
    stored_ok = {}
    for table, topic in TABLES.items():
        stored = offsets.stored_offsets(catalog.load_table(table).properties, PIPELINE)
        topic_ends = {tp: end for tp, end in ends.items() if tp[0] == topic}
        stored_ok[table] = {f"{t}/{p}": (stored.get((t, p)), end) for (t, p), end in topic_ends.items()
                            if stored.get((t, p)) != end}
    report["stored_offsets_off"] = {t: v for t, v in stored_ok.items() if v}
    report["verify_s"] = round(time.monotonic() - started, 1)
    return report


def spark_read(spark: Any, table: str, columns: str, attempts: int = 3) -> Any:
    """``table`` read by Spark SQL, as Arrow. Read again after a failure: the first statement after
    the catalog's server restarted meets a pooled connection it cut (Iceberg's JDBC catalog drops
    such a connection only on the next failure, "connection closed", which it retries)."""
    for attempt in range(1, attempts + 1):
        try:
            spark.sql(f"REFRESH TABLE {table}")
            return spark.sql(f"SELECT {columns} FROM {table}").toArrow()
        except Exception:   # raised again after the last attempt
            if attempt == attempts:
                raise
            time.sleep(1.0)
    raise AssertionError("unreachable")


def summarize(report: dict[str, Any]) -> tuple[int, int]:
    """(lost, duplicates) over every engine, table and the dead-letter topic."""
    lost = dup = 0
    for per in report["engines"].values():
        for r in per.values():
            lost += r["lost"] + r.get("wrong_values", 0) + r.get("stale", 0) + r.get("unexpected", 0)
            dup += r.get("duplicates", 0) + r.get("keys_twice", 0)
    lost += report["dead_letters"]["lost"] + report["dead_letters"]["unexpected"]
    dup += report["dead_letters"]["duplicates"]
    return lost, dup


# -- the run ----------------------------------------------------------------------------------

def stored_all(catalog: Any) -> dict[str, dict[tuple[str, int], int]] | None:
    try:
        return {t: offsets.stored_offsets(catalog.load_table(t).properties, PIPELINE) for t in TABLES}
    except Exception:  # noqa: BLE001 - a table not created yet, or the catalog locked by a fault
        return None


def topic_ends(bootstrap: str, timeout: float = 180) -> dict[tuple[str, int], int]:
    """Both topics' end offsets, waiting out a broker restart (another fault's)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return asyncio.run(end_offsets(bootstrap, [EVENTS, CHANGES]))
        except Exception:  # the broker is down for now
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def caught_up(stored: dict[str, dict[tuple[str, int], int]], target: dict[tuple[str, int], int]) -> bool:
    return all(stored[t].get(tp, 0) >= end for t, topic in TABLES.items() for tp, end in target.items()
               if tp[0] == topic)


def brokers_of(broker: KafkaBroker | KafkaCluster) -> int:
    return len(broker.nodes) if isinstance(broker, KafkaCluster) else 1


def run(workdir: Path, broker: KafkaBroker | KafkaCluster, *, faults: int, seed: int, max_concurrent: int = 3,
        events_per_tick: int = 300, changes_per_tick: int = 100, maintenance: bool = True,
        gap_s: tuple[float, float] = (0.5, 3.0), recovery_timeout_s: float = 300, spark_session: Any = None,
        catalog: str = "sqlite", postgres: PostgresServer | None = None, rest: RestStack | None = None,
        mode: str = "distributed", min_per_kind: int = 1, one_at_a_time: bool = False, keys: int = KEYS,
        progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Inject at least ``faults`` faults (the first ones one of each kind, in a seeded order), then
    verify. ``spark_session``: a running session to use (the test session's); the catalog is added
    to it. ``maintenance``: the pipeline's own Spark maintenance on. ``catalog``: ``sqlite`` (in the
    run's folder) or ``postgresql`` (a new database on ``postgres``, which the run also restarts).
    ``mode``: three processes in distributed mode, or one in single mode (a rebalance storm's extra
    processes then coordinate their own partitions, as single mode does). ``min_per_kind``: past
    ``faults``, the run goes on drawing the kinds still below it. ``keys``: the upsert table's
    keys, every one inserted before the first fault. ``one_at_a_time``: a fault starts
    only once the one before has ended and every table has caught up with it, so each recovery
    figure is one fault's alone (the issue's per-kind recovery target), not a storm's."""
    if one_at_a_time:
        max_concurrent = 1
    rng = random.Random(seed)
    workdir = workdir.resolve()   # the configs name the catalog by absolute path
    workdir.mkdir(parents=True, exist_ok=True)
    bootstrap = broker.bootstrap
    for topic in (EVENTS, CHANGES):
        asyncio.run(create_topic(bootstrap, topic, PARTITIONS, brokers_of(broker)))
    site = Site.make(catalog, workdir, seed, postgres, rest)
    catalog_cfg = site.config()
    (workdir / "warehouse").mkdir(exist_ok=True)
    procs = Procs(workdir, bootstrap, site, maintenance=maintenance, mode=mode)
    producer = Producer(bootstrap, rng.randrange(1 << 30), events=events_per_tick, changes=changes_per_tick,
                        tick_s=0.5, keys=keys)
    spark_holder: dict[str, Any] = {}
    spark_lock = threading.Lock()

    def spark() -> Any:
        with spark_lock:
            if "s" not in spark_holder:
                from frazil.spark import jars, session
                if spark_session is not None:
                    for key, value in session.catalog_conf("frazil", catalog_cfg.properties).items():
                        spark_session.conf.set(key, value)
                    spark_holder["s"] = spark_session
                    return spark_session
                settings = session.conf("frazil", catalog_cfg.properties, master="local[1]",
                                        jars=jars.jars(aws=session.needs_aws(catalog_cfg.properties)),
                                        app_name="chaos-verifier",
                                        extra={"spark.driver.memory": "1g", "spark.ui.showConsoleProgress": "false"})
                spark_holder["s"] = session.get(settings)
            return spark_holder["s"]

    chaos = Chaos(workdir, broker, procs, producer, rng, site, spark)
    restarts: Counter[str] = Counter()
    for name in procs.workers:
        procs.start(name)
    producer.start()
    tables = iceberg_catalog.load(catalog_cfg)
    started = time.monotonic()
    done: list[Fault] = []
    pending: list[Fault] = []
    running: dict[threading.Thread, list[Fault]] = {}
    errors: list[BaseException] = []
    codes: dict[str, int] = {}
    # warm up: every table exists, and has committed every key's first insert, before the first fault
    deadline = time.monotonic() + 180
    preloaded: dict[tuple[str, int], int] | None = None
    while True:
        procs.supervise(lambda n: restarts.update([n]))
        if preloaded is None and producer.preloaded >= producer.keys:
            producer.wait_chunk()   # the chunk with the last inserts is in the topic
            preloaded = topic_ends(bootstrap)
        s = stored_all(tables)
        if s is not None and all(s.values()) and preloaded is not None and caught_up(s, preloaded):
            break
        if time.monotonic() > deadline:
            raise ChaosError(f"the pipeline did not commit every table and key within 180 s; logs in "
                             f"{workdir / 'logs'}")
        time.sleep(0.5)
    progress(f"  warm: every table committed after {time.monotonic() - started:.0f}s; injecting {faults} faults")
    injected = 0
    next_at = time.monotonic()
    last_report = time.monotonic()
    try:
        while True:
            procs.supervise(lambda n: restarts.update([n]))
            if producer.error is not None:
                raise ChaosError(f"the producer failed: {producer.error!r}")
            for thread in [t for t in running if not t.is_alive()]:
                for fault in running.pop(thread):
                    if fault.counted:
                        done.append(fault)
                        pending.append(fault)
                    elif fault.kind not in {f.kind for f in done}:
                        chaos.first.append(fault.kind)   # missed (a point not reached): every kind happens once
            if errors:
                raise errors[0]
            counted = sum(1 for f in done if f.counted)
            so_far = Counter(f.kind for f in done) + Counter(t.name.removeprefix("fault-") for t in running)
            short = [k for k in chaos.kinds if so_far[k] < min_per_kind]
            if (counted + len(running) < faults or chaos.first or short) and time.monotonic() >= next_at \
                    and len(running) < max_concurrent and not [f for f in pending
                                                                if one_at_a_time or time.monotonic() - f.ended > 60]:
                kind = chaos.pick(short if counted + len(running) >= faults else None)
                fault_rng = random.Random(rng.randrange(1 << 30))
                box: list[Fault] = []

                def work(kind: str = kind, fault_rng: random.Random = fault_rng, box: list[Fault] = box) -> None:
                    try:
                        fault = chaos.run(kind, fault_rng)
                        fault.target = topic_ends(bootstrap)
                        box.append(fault)
                    except BaseException as exc:  # noqa: BLE001 - raised in the main loop
                        errors.append(exc)

                thread = threading.Thread(target=work, name=f"fault-{kind}", daemon=True)
                running[thread] = box
                thread.start()
                injected += 1
                next_at = time.monotonic() + rng.uniform(*gap_s)
            if pending:
                s = stored_all(tables)
                now = time.monotonic()
                if s is not None:
                    for fault in [f for f in pending if caught_up(s, f.target)]:
                        fault.recovered = now
                        pending.remove(fault)
                stuck = [f for f in pending if now - f.ended > recovery_timeout_s]
                if stuck:
                    raise ChaosError(f"no recovery within {recovery_timeout_s:.0f}s of {stuck[0].kind} "
                                     f"({stuck[0].detail}); stored {s}, target {stuck[0].target}")
            counted = sum(1 for f in done if f.counted)
            if time.monotonic() - last_report > 30:
                last_report = time.monotonic()
                kinds = Counter(f.kind for f in done)
                progress(f"  {time.monotonic() - started:5.0f}s: {counted} faults ({len(pending)} recovering, "
                         f"{len(running)} running), {producer.next_id:,} events, {producer.version:,} changes sent; "
                         + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
            if counted >= faults and not chaos.first and not short and not running and not pending:
                break
            time.sleep(0.25)
        fault_phase_s = time.monotonic() - started
        producer.stopping.set()
        producer.join(timeout=120)
        ends = topic_ends(bootstrap)
        deadline = time.monotonic() + recovery_timeout_s
        while True:
            procs.supervise(lambda n: restarts.update([n]))
            s = stored_all(tables)
            if s is not None and caught_up(s, ends):
                break
            if time.monotonic() > deadline:
                raise ChaosError(f"the tables did not catch up with the topics: stored {s}, ends {ends}")
            time.sleep(0.5)
    finally:
        producer.stopping.set()
        codes = procs.stop_all()
        close_catalog(tables)
    bad_exits = {n: c for n, c in codes.items() if c not in (0, -signal.SIGKILL)}
    progress(f"  faults done in {fault_phase_s:.0f}s; verifying (topics read back, pyiceberg, Spark SQL, dead letters)")
    report = verify(bootstrap, catalog_cfg, spark())
    lost, dup = summarize(report)
    recovery: dict[str, dict[str, float]] = {}
    for kind in sorted({f.kind for f in done}):
        times = [f.recovered - f.ended for f in done if f.kind == kind and f.recovered is not None]
        recovery[kind] = {"p50": round(statistics.median(times), 1), "max": round(max(times), 1)}
    kinds = Counter(f.kind for f in done)
    maintained: Counter[str] = Counter()   # the pipeline's own Spark maintenance jobs that finished
    for logfile in (workdir / "logs").glob("*.log"):
        for line in logfile.read_text(errors="replace").splitlines():
            if "frazil.spark.jobs: maintenance " in line and " took " in line:
                maintained[line.split("frazil.spark.jobs: maintenance ", 1)[1].split(" ", 1)[0]] += 1
    # records that reached their table: events by their offsets, changes by the upsert table's offsets
    # (its rows were checked against the latest change of every key)
    landed = (report["engines"]["pyiceberg"]["chaos.events"]["rows"]
              - report["engines"]["pyiceberg"]["chaos.events"]["duplicates"]
              + sum(end for (t, _), end in ends.items() if t == CHANGES))
    result = {
        "faults_total": len(done), "faults": dict(sorted(kinds.items())), "produced": report["produced"],
        "landed": landed, "dead_lettered": report["dead_letters"]["records"], "lost": lost, "duplicates": dup,
        "keys": producer.keys, "keyed_rows": report["engines"]["pyiceberg"]["chaos.state"]["rows"],
        "recovery_s": recovery, "one_at_a_time": one_at_a_time, "seed": seed, "catalog": catalog, "mode": mode,
        "brokers": brokers_of(broker), "fault_phase_s": round(fault_phase_s, 1),
        "restarts": dict(restarts), "start_failures": procs.start_failures, "producer_retries": producer.failures,
        "schema_changes": producer.fields_added,
        "pipeline_maintenance_jobs": dict(sorted(maintained.items())),
        "exit_codes": codes, "bad_exits": bad_exits, "verify": report,
        "log": [f"{f.started - started:7.1f}s {f.kind}: {f.detail}" for f in sorted(done, key=lambda f: f.started)],
    }
    return result


def ok(result: dict[str, Any]) -> bool:
    return (result["lost"] == 0 and result["duplicates"] == 0 and not result["bad_exits"]
            and not result["verify"]["stored_offsets_off"]
            and not any(r.get("missing_columns") for per in result["verify"]["engines"].values() for r in per.values()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=500)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--concurrent", type=int, default=3, help="faults in flight at once, at most")
    parser.add_argument("--min-per-kind", type=int, default=20,
                        help="past --faults, go on until every kind has happened this many times "
                             "(at most --faults/20: a short run asks every kind once)")
    parser.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                        help="one broker, or a cluster of three (replication factor 3, min.insync.replicas 2)")
    parser.add_argument("--catalog", choices=CATALOGS, default="sqlite",
                        help="SQLite in the run's folder; PostgreSQL, or REST on S3: servers of its own, with faults")
    parser.add_argument("--dir", type=Path, default=Path(".run/chaos"))
    parser.add_argument("--out", type=Path, default=None,
                        help="the summary (default benches/results/chaos-<catalog>-<mode>-<brokers>b.json)")
    parser.add_argument("--mode", choices=MODES, default="distributed",
                        help="three processes in distributed mode, or one in single mode")
    parser.add_argument("--one-at-a-time", action="store_true",
                        help="each fault alone: the next starts once the tables caught up with the last "
                             "(recovery per kind without a storm; summary chaos-<set-up>-one-at-a-time.json)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)   # the runner's own producer, during broker restarts
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    name = f"{args.catalog}-{args.mode}-{args.brokers}b" + ("-one-at-a-time" if args.one_at_a_time else "")
    out = args.out or Path(f"benches/results/chaos-{name}.json")
    shutil.rmtree(args.dir, ignore_errors=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "python", "rust"], capture_output=True, text=True,
                           check=False).stdout.strip()
    concurrent = 1 if args.one_at_a_time else args.concurrent
    print(f"chaos {name}: {args.faults} faults, at most {concurrent} at once, seed {seed}, head {head[:12]}"
          f"{' (python/ or rust/ edited since)' if dirty else ''} (replay: make chaos CHAOS_ARGS='--seed {seed} "
          f"--faults {args.faults} --catalog {args.catalog} --mode {args.mode} --brokers {args.brokers}"
          f"{' --one-at-a-time' if args.one_at_a_time else ''}')", flush=True)
    with contextlib.ExitStack() as stack:
        kafka = KafkaCluster.start(args.dir / "kafka") if args.brokers == 3 else KafkaBroker.start(args.dir / "kafka")
        broker = stack.enter_context(kafka)
        postgres = stack.enter_context(PostgresServer.start()) if args.catalog == "postgresql" else None
        rest = stack.enter_context(RestStack.start(args.dir.resolve())) if args.catalog == "rest" else None
        result = run(args.dir, broker, faults=args.faults, seed=seed, max_concurrent=args.concurrent,
                     catalog=args.catalog, postgres=postgres, rest=rest, mode=args.mode,
                     min_per_kind=min(args.min_per_kind, args.faults // 20), one_at_a_time=args.one_at_a_time,
                     progress=lambda s: print(s, flush=True))
    keys = ("catalog", "mode", "brokers", "seed", "faults_total", "faults", "produced", "landed", "dead_lettered",
            "lost", "duplicates", "keys", "keyed_rows", "recovery_s", "one_at_a_time", "fault_phase_s")
    summary = {"head": head, "edited_since_head": bool(dirty), **{k: result[k] for k in keys}}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    (args.dir / "report.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "log"}, indent=2, default=str))
    good = ok(result)
    print(f"chaos {'OK' if good else 'FAILED'} (seed {seed}): wrote {out}; every fault in "
          f"{args.dir / 'report.json'}")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
