"""A routed pipeline for the tests: 3 topics fanned out to 5 tables by topic regex and route
field, the rules written out again independently of frazil's router, and a reader that checks
every table holds exactly the records its rules take, once each."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import support
from frazil.config import Config

KINDS = ("order", "refund", "click", "view")
REGIONS = ("eu", "us", "apac")
COLUMNS = '[{ name = "id", type = "long", required = true }, { name = "kind", type = "string" }]'
TABLES = [   # name, topics regex, route field, route regex
    ("db.orders", "shop-orders-.*", "", ""),
    ("db.shop", "shop-.*", "", ""),
    ("db.refunds", "", "kind", "refund"),
    ("db.web_eu", "web-.*", "meta.region", "eu"),
    ("db.everything", "", "", ""),
]


def takes(table: tuple[str, str, str, str], topic: str, kind: str, region: str) -> bool:
    """The routing rules, written out again independently of frazil's router."""
    _, topics, field, route = table
    value = {"kind": kind, "meta.region": region}.get(field)
    return ((not topics or re.fullmatch(topics, topic) is not None)
            and (not field or re.fullmatch(route, value or "") is not None))


def config(tmp_path: Path, bootstrap: str, topics: list[str] | str, pipeline: str, extra: str = "",
           catalog: tuple[str, dict[str, str]] = ("frazil", {"uri": "sqlite:///warehouse/catalog.db",
                                                             "warehouse": "file://warehouse"}),
           pipeline_extra: str = "") -> Path:
    """``topics``: a list, or a pattern (a string); ``catalog``: its name and properties;
    ``extra``: more sections (TOML); ``pipeline_extra``: more ``[pipeline]`` keys."""
    props = ", ".join(f"{k} = {json.dumps(v)}" for k, v in catalog[1].items())
    tables = "\n".join(
        f'[[tables]]\nname = "{name}"\ncolumns = {COLUMNS}\nunknown_fields = "ignore"\n'   # meta.region: routing only
        + (f'topics = "{t}"\n' if t else "")
        + (f'route_field = "{f}"\nroute = "{r}"\n' if f else "") for name, t, f, r in TABLES)
    path = tmp_path / "frazil.toml"
    path.write_text(f"""[pipeline]
name = "{pipeline}"
commit_interval_s = 0.5
outage_timeout_s = 300
{pipeline_extra}

[kafka]
bootstrap_servers = "{bootstrap}"
{f"topic_pattern = {json.dumps(topics)}{chr(10)}metadata_max_age_ms = 1000" if isinstance(topics, str)
   else f"topics = {json.dumps(topics)}"}
session_timeout_ms = 2000
heartbeat_interval_ms = 500

[catalog]
name = "{catalog[0]}"
properties = {{ {props} }}

[maintenance]
enabled = false
{extra}
{tables}""")
    return path


def value(i: int) -> bytes:
    return json.dumps({"id": i, "kind": KINDS[i % 4], "meta": {"region": REGIONS[(i // 4) % 3]}}).encode()


async def produce(bootstrap: str, topics: list[str], start: int, count: int) -> None:
    for n, topic in enumerate(topics):
        await support.produce(bootstrap, topic,
                              (value(i) for i in range(start + n * 10_000, start + n * 10_000 + count)), 2)


@contextlib.contextmanager
def running(config_path: Path, log: Path, faults: str = "") -> Iterator[subprocess.Popen[bytes]]:
    """``frazil run`` for the block; then SIGTERM, and it must drain and exit 0."""
    proc = run_frazil(config_path, log, faults)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()[-4000:]


def run_frazil(config_path: Path, log: Path, faults: str = "") -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config_path)],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "FRAZIL_FAULTS": faults})


def wait_until_every_table_holds_its_records(cfg: Config, ends: dict[tuple[str, int], int],
                                             proc: subprocess.Popen[bytes], log: Path, *,
                                             but: str = "") -> dict[str, int]:
    """Until :func:`check_every_table` passes (the process still running); then its row counts."""
    deadline = time.monotonic() + 120
    last: AssertionError | None = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-4000:]
        try:
            return check_every_table(cfg, ends, but=but)
        except AssertionError as exc:
            last = exc
        except Exception as exc:  # noqa: BLE001 - a table not created yet
            last = AssertionError(f"{type(exc).__name__}: {exc}")
        time.sleep(0.5)
    raise AssertionError(f"not every table holds its records within 120 s: {last}; log: {log.read_text()[-3000:]}")


def check_every_table(cfg: Config, ends: dict[tuple[str, int], int], *, but: str = "") -> dict[str, int]:
    """db.everything holds every offset once (checked against Kafka's end offsets); every other
    table (but ``but``) holds exactly the records its rules take, once each. Returns rows per table."""
    catalog = support.catalog_of(cfg)
    everything = catalog.load_table("db.everything").scan().to_arrow()
    support.assert_exactly_once(support.count_offsets(catalog, "db.everything"), ends)
    kind_of = {(t, p, o): k for t, p, o, k in zip(*(everything.column(c).to_pylist() for c in
                                                    ("_kafka_topic", "_kafka_partition", "_kafka_offset", "kind")),
                                                  strict=True)}
    id_of = dict(zip(kind_of, everything.column("id").to_pylist(), strict=True))   # each offset once: checked above
    rows = {}
    for table in TABLES:
        if table[0] == but:
            continue
        want = {tpo for tpo, kind in kind_of.items()
                if takes(table, tpo[0], kind, REGIONS[(id_of[tpo] // 4) % 3])}
        got = support.count_offsets(catalog, table[0])
        doubled = {k: n for k, n in got.items() if n > 1}
        assert not doubled, f"{table[0]}: records landed twice: {list(doubled.items())[:5]}"
        assert set(got) == want, (f"{table[0]}: {len(set(got) - want)} record(s) that do not belong, "
                                  f"{len(want - set(got))} missing, e.g. {sorted(set(got) ^ want)[:5]}")
        rows[table[0]] = len(got)
    return rows
