"""Where a process's time goes: py-spy samples summarised by thread and by the hot path's steps.

``record(pid, path)`` attaches py-spy (native frames included, so Rust, Arrow and the garbage
collector show up) until the process exits; ``summarise(path)`` turns the raw stacks into the
seconds each thread spent inside each step below (a sample counts for every step on its stack).
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

RATE_HZ = 100
STEPS = {
    "consume: aiokafka getmany": "AIOKafkaConsumer.getmany",
    "consume: record objects": "PartitionRecords._consumer_record",
    "decode: RecordBuffer.append (lists + native)": "RecordBuffer.append",
    "decode: arrow-json tape": "arrow_json::reader",
    "garbage collector": "gc_collect_main",
    "write: pyiceberg data files": "_dataframe_to_data_files",
    "write: parquet (arrow C++)": "parquet::",
    "write: zstd": "ZSTD_",
    "commit: catalog": "commit_files",
    "journal append": "Journal.append",
    "waiting on a lock (idle worker)": "PyThread_acquire_lock_timed",
    "waiting for the network (idle loop)": "uv__io_poll",
}


def record(pid: int, path: Path) -> subprocess.Popen[bytes]:
    beside = Path(sys.executable).parent / "py-spy"  # the virtualenv's, when it is not on PATH
    exe = str(beside) if beside.exists() else shutil.which("py-spy")
    if exe is None:
        raise RuntimeError("py-spy is needed for --profile (make bench-deps installs it)")
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--native", "--threads", "--rate", str(RATE_HZ),
                             "--format", "raw", "--output", str(path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def summarise(path: Path) -> dict[str, dict[str, float]]:
    """``{thread: {"samples_s": s, step: s, ...}}`` for the threads with the most samples."""
    per: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        thread = re.sub(r"^thread \(\d+\):? ?", "", frames[0]) or "unnamed"
        n = int(count)
        per[thread]["samples_s"] += n
        for step, needle in STEPS.items():
            if any(needle in f for f in frames[1:]):
                per[thread][step] += n
    busiest = sorted(per.items(), key=lambda kv: -kv[1]["samples_s"])[:4]
    return {t: {k: round(v / RATE_HZ, 2) for k, v in c.most_common()} for t, c in busiest}
