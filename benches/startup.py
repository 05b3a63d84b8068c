"""Start-up: how long frazil takes to import, to answer ``--help``, and to reach its first fetch.

Every figure is a fresh process, measured ``--runs`` times (9), median reported with every run:

- ``python -c pass``: the interpreter alone, the floor under everything else;
- ``import frazil.daemon`` and ``frazil --help`` (``python -m frazil.cli --help``);
- ``frazil run``: a real run against a real broker (one KRaft node, ``frazil_dev.kafka_broker``) and
  a SQLite catalog, restarted on a table that exists (the first run, which creates it, is not
  counted), as a supervisor restarts the daemon. Two points: ``first poll``, when the ingest loop
  asks Kafka for its first fetch (what start-up loads and sets up before then: config, catalog,
  tables, transaction log, the pipeline), and ``positioned``, when the group has assigned the
  partitions and they stand at the table's offsets (the first records can be taken).

Wall time is from just before the process is started; CPU time is the process's user + system
time (every thread). The run's points are read by a logging filter the launcher adds to
``frazil.ingest.source`` (the log lines ``consuming ...`` and ``positioned ...``); nothing in
frazil is changed for it. After ``positioned`` the run is stopped with SIGTERM, as a supervisor
would.

``--baseline`` measures another frazil, interleaved run by run with this checkout's (the order
flipped each round): a directory that is a checkout of it (its ``python/`` goes first on
``PYTHONPATH``; this build's native extension is linked in when it has none), or a git commit, checked
out for the run in a temporary worktree. The same interpreter and libraries serve both.
Writes ``benches/results/startup.json``.

    python benches/startup.py [--runs N] [--baseline DIR|COMMIT]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _dev  # noqa: F401 - dev/ on the path, for frazil_dev
import _results
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.workload import CLICKSTREAM_COLUMNS, create_topic, produce, sample_events

REPO = Path(__file__).resolve().parents[1]
TOPIC, PARTITIONS, RECORDS = "startup", 4, 2_000
RUN_TIMEOUT_S = 120.0

CONFIG = """\
[pipeline]
name = "{name}"
commit_interval_s = 1.0
[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
[catalog]
properties = {{ uri = "sqlite:///warehouse/catalog.db", warehouse = "file://warehouse" }}
[maintenance]
enabled = false
[table]
name = "bench.{name}"
{columns}
"""

# The launcher of a measured `frazil run`: `python -m frazil.cli run --config FILE`, plus a logging
# filter that prints, on the ingest source's two start-up lines, the monotonic time, the process's
# CPU seconds so far and how many modules are loaded. stdout is the launcher's: `run` prints nothing.
LAUNCHER = """\
import logging, resource, runpy, sys, time

class _Points(logging.Filter):
    def filter(self, record):
        for prefix, point in (("consuming ", "poll"), ("positioned ", "positioned")):
            if isinstance(record.msg, str) and record.msg.startswith(prefix):
                usage = resource.getrusage(resource.RUSAGE_SELF)
                print(point, time.monotonic(), usage.ru_utime + usage.ru_stime, len(sys.modules), flush=True)
        return True

logging.getLogger("frazil.ingest.source").addFilter(_Points())
sys.argv = ["frazil", "run", "--config", sys.argv[1]]
runpy.run_module("frazil.cli", run_name="__main__", alter_sys=True)
"""

# ``import frazil.daemon`` ends with os._exit: what the import costs, not the interpreter's
# teardown of what it loaded (0.3 s of CPU more for what the daemon loaded before its imports were
# deferred). ``--help`` is timed to its exit, as its user waits for it.
COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "import frazil.daemon": ["-c", "import frazil.daemon, os; os._exit(0)"],
    "frazil --help": ["-m", "frazil.cli", "--help"],
}


class Side:
    """One frazil to measure: its ``python/`` first on the path."""

    def __init__(self, name: str, checkout: Path, workdir: Path, bootstrap: str) -> None:
        self.name, self.checkout, self.workdir, self.bootstrap = name, checkout, workdir, bootstrap
        self.env = {**os.environ, "PYTHONPATH": str(checkout / "python")}
        self.pipeline = f"startup_{name}"
        self.config = workdir / f"{self.pipeline}.toml"
        self.config.write_text(CONFIG.format(name=self.pipeline, bootstrap=bootstrap, topic=TOPIC,
                                             columns=CLICKSTREAM_COLUMNS))

    def command(self, args: list[str]) -> dict[str, float]:
        """One fresh process running ``python ARGS``: wall and CPU ms."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run([sys.executable, *args], env=self.env, cwd=self.workdir, check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return {"wall_ms": wall * 1000, "cpu_ms": cpu * 1000}

    def run(self) -> dict[str, float]:
        """One ``frazil run`` from process start to its first poll and to its partitions positioned,
        then stopped with SIGTERM."""
        log = open(self.workdir / f"{self.pipeline}.log", "ab")
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(self.config)], env=self.env, cwd=self.workdir,
                                stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        points: dict[str, float] = {}
        watchdog = threading.Timer(RUN_TIMEOUT_S, proc.kill)   # a run that never gets there fails, not hangs
        watchdog.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                point, at, cpu, modules = line.split()
                points[f"{point}_wall_ms"] = (float(at) - started) * 1000
                points[f"{point}_cpu_ms"] = float(cpu) * 1000
                points[f"{point}_modules"] = int(modules)
                if point == "positioned":
                    break
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait()
            watchdog.cancel()
        if "positioned_wall_ms" not in points or code != 0:
            raise RuntimeError(f"{self.name}: frazil run exited with {code} before its partitions were positioned; "
                               f"see {self.workdir / (self.pipeline + '.log')}")
        return points


def interleaved(sides: list[Side], runs: int, measure: Callable[[Side], dict[str, float]],
                what: str) -> dict[str, list[dict[str, float]]]:
    """``measure`` each side ``runs`` times, alternating, the order flipped each round (after one
    uncounted warm-up each: the page cache, bytecode, the table's first creation)."""
    for side in sides:
        measure(side)
    out: dict[str, list[dict[str, float]]] = {side.name: [] for side in sides}
    for i in range(runs):
        for side in (sides if i % 2 == 0 else sides[::-1]):
            out[side.name].append(measure(side))
        print(f"  {what}: round {i + 1}/{runs}", end="\r", flush=True)
    print(" " * 60, end="\r")
    return out


def summary(side: str, what: str, runs: list[dict[str, float]], prefix: str = "") -> dict[str, Any]:
    wall = [r[f"{prefix}wall_ms"] for r in runs]
    cpu = [r[f"{prefix}cpu_ms"] for r in runs]
    row: dict[str, Any] = {"side": side, "what": what, "runs": len(runs),
                           "wall_ms": round(statistics.median(wall)), "cpu_ms": round(statistics.median(cpu)),
                           "wall_ms_runs": [round(w) for w in wall], "cpu_ms_runs": [round(c) for c in cpu]}
    if f"{prefix}modules" in runs[0]:
        row["modules_loaded"] = round(statistics.median(r[f"{prefix}modules"] for r in runs))
    return row


@contextmanager
def baseline_checkout(spec: str) -> Iterator[tuple[Path, str]]:
    """The baseline's checkout (a directory as given, or a git commit in a temporary worktree) and its commit."""
    path = Path(spec)
    if path.is_dir():
        yield path.resolve(), _commit(path)
        return
    tmp = Path(tempfile.mkdtemp(prefix="frazil-startup-base-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tmp / "checkout"), spec],
                   check=True)
    try:
        yield tmp / "checkout", _commit(tmp / "checkout")
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tmp / "checkout")], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def _commit(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True)
    dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no", "--",
                            "python"], capture_output=True, text=True).stdout.strip()
    return done.stdout.strip() + (" + uncommitted changes in python/" if dirty else "")


def prepare(checkout: Path) -> None:
    """Bytecode for every module (as ``make build`` writes it), and the native extension: a checkout
    that was never built gets a link to this one's."""
    package = checkout / "python" / "frazil"
    if not any(package.glob("_native*.so")):
        (native,) = (REPO / "python" / "frazil").glob("_native*.so")
        (package / native.name).symlink_to(native)
        print(f"linked {native} into {package}")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="measured runs of each figure (median reported)")
    parser.add_argument("--baseline", metavar="DIR|COMMIT",
                        help="another frazil to measure beside this one: a checkout, or a git commit")
    args = parser.parse_args()
    workdir = Path(".run/bench-startup").resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    began = time.monotonic()
    with KafkaBroker.start(workdir / "kafka") as broker, \
            (baseline_checkout(args.baseline) if args.baseline else _none()) as base:
        asyncio.run(create_topic(broker.bootstrap, TOPIC, PARTITIONS))
        asyncio.run(produce(broker.bootstrap, TOPIC, sample_events(RECORDS), partitions=PARTITIONS, label=None))
        checkouts = {"this": (REPO, _commit(REPO))}
        if base is not None:
            checkouts["baseline"] = base
        for checkout, _ in checkouts.values():
            prepare(checkout)
        sides = [Side(name, checkout, workdir, broker.bootstrap) for name, (checkout, _) in checkouts.items()]
        rows: list[dict[str, Any]] = []
        for what, command in COMMANDS.items():
            for side, runs in interleaved(sides, args.runs, lambda s, c=command: s.command(c), what).items():
                rows.append(summary(side, what, runs))
        for side, runs in interleaved(sides, args.runs, Side.run, "frazil run").items():
            rows.append(summary(side, "frazil run: first poll", runs, "poll_"))
            rows.append(summary(side, "frazil run: positioned", runs, "positioned_"))
    rows.sort(key=lambda r: (list(COMMANDS).index(r["what"]) if r["what"] in COMMANDS else len(COMMANDS),
                             r["what"], r["side"] != "this"))
    print(f"{'':<28}{'side':<10}{'wall ms':>9}{'cpu ms':>9}  runs (wall ms)")
    for r in rows:
        print(f"{r['what']:<28}{r['side']:<10}{r['wall_ms']:>9}{r['cpu_ms']:>9}  {r['wall_ms_runs']}")
    _results.write("startup", rows, commits={name: commit for name, (_, commit) in checkouts.items()},
                   machine={"cpus": os.cpu_count(), "python": platform.python_version(),
                            "wall_s": round(time.monotonic() - began)})
    return 0


@contextmanager
def _none() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    sys.exit(main())
