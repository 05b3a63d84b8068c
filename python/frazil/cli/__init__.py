"""The ``frazil`` command line."""

from __future__ import annotations

import os

# pyarrow's memory pool: jemalloc rather than its default mimalloc, which kept what a Parquet write
# freed resident for good (+139 MB for a 1.4M-row flush; peak RSS of make bench's clickstream 881 MiB
# at a 512 MiB budget, 762 with jemalloc) and wrote wide rows slower (1.62 s against 1.12 for 320k rows).
# Read when pyarrow loads; a setting of the user's own wins.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
# pyarrow imports numpy, whose OpenBLAS starts a thread per core that spins waiting for work frazil
# never gives it: ~0.1 s of CPU at every start (perf, make bench's clickstream run), on the core
# the broker and the decode need.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from frazil import malloc  # noqa: E402  (before the imports below allocate: the heap keeps what it frees)

malloc.tune(os.environ)

import argparse
import asyncio
import json
import logging
import re
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from aiokafka.errors import KafkaError

from frazil import config as config_mod
from frazil import logs
from frazil.errors import CatalogUnavailable, ConfigError, FrazilError, KafkaUnavailable, NotFound

log = logging.getLogger("frazil")
T = TypeVar("T")
CATALOG_WAIT_S = 2.0   # one-shot commands: how long a locked SQLite catalog is waited for per statement


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("frazil")
    except PackageNotFoundError:   # run from a source tree that was never installed
        return "unknown (not installed)"


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", type=Path, default=Path("frazil.toml"), help="TOML config (default: frazil.toml)")


def _run(args: argparse.Namespace) -> int:
    from frazil import daemon

    cfg = config_mod.load(args.config)
    logs.setup(cfg.log_level, cfg.log_format)
    daemon.run(cfg)
    return 0


def _keyed(table: config_mod.TableConfig) -> str:
    """How a keyed table takes its records, for ``config check``."""
    c = table.changes
    if c is None:
        return ""
    what = "debezium" if c.op == ("op",) and c.after == ("after",) else f"field {'.'.join(c.op)}" if c.op else "the row"
    merging = (f"merged by Spark into {c.target} every {c.merge_interval_s:g}s or {c.merge_min_changes} changes"
               if c.target else "position deletes every commit")
    return (f"\n             mode={c.mode} ({what}) key={','.join(table.identifier_columns)} tombstones={c.tombstones}; "
            + merging)


def _check(args: argparse.Namespace) -> int:
    from frazil import kafka_clients

    cfg = config_mod.load(args.config)
    kafka_clients.options(cfg.kafka)   # the TLS files load (a CA that is not PEM is a config error)
    print(f"{args.config}: ok")
    print(f"  pipeline   {cfg.pipeline} (commit every {cfg.commit_interval_s:g}s, "
          f"at most {cfg.max_buffer_records} buffered records)")
    topics = f"topic_pattern={cfg.kafka.topic_pattern}" if cfg.kafka.topic_pattern else f"topics={','.join(cfg.kafka.topics)}"
    from frazil.iceberg.catalog import describe

    print(f"  kafka      {cfg.kafka.bootstrap_servers} {topics} group={cfg.kafka.group_id} "
          f"security={cfg.kafka.security.describe()}")
    print(f"  catalog    {cfg.catalog.name} {describe(cfg.catalog)}")
    for table in cfg.tables:
        takes = " ".join(filter(None, (f"topics~{table.topics}" if table.topics else "",
                                       f"{'.'.join(table.route_field)}~{table.route}" if table.route_field else "")))
        units = ",".join(f"{c.name}:{c.unit}" for c in table.columns if c.unit)
        rounded = ",".join(c.name for c in table.columns if c.rounding)
        print(f"  table      {table.name} columns={len(table.columns) or 'inferred'} metadata_columns={table.metadata_columns} "
              f"partition_by={list(table.partition_by)} takes={takes or 'every record'} "
              f"unknown_fields={table.unknown_fields}" + (f" units={units}" if units else "")
              + (f" rounding(half_even)={rounded}" if rounded else "")
              + (" case_insensitive" if table.case_insensitive else "") + _keyed(table))
    print(f"  bad records {cfg.on_bad_record}" + (f" -> {cfg.dead_letter_topic}" if cfg.on_bad_record == "dead_letter"
                                                 else " (stop, naming the record)"))
    if cfg.dynamic is not None:
        d = cfg.dynamic
        print(f"  dynamic    {d.table}{' for topics ~' + d.topics if d.topics else ''}: "
              + ("created on first use" if d.create else "existing tables only") + ", "
              + (f"{len(d.columns)} columns" if d.columns else "schema inferred from the first records")
              + f", partition_by={list(d.partition_by)}, unknown_fields={d.unknown_fields}")
    print(f"  txlog      {cfg.txlog_dir} (fsync {cfg.txlog_fsync})")
    print(f"  memory     budget {cfg.memory_budget_bytes // (1024 * 1024)} MiB; stop after {cfg.outage_timeout_s:g}s of failing commits")
    m = cfg.maintenance
    print(f"  spark      {cfg.spark.master}; "
          + (f"flushes of {cfg.spark.bulk_min_rows}+ rows written by Spark" if cfg.spark.bulk_min_rows else "bulk writes off"))
    print("  maintenance " + (f"every {m.interval_s:g}s, expiry above {m.max_snapshots} snapshots, files to "
                             f"{m.target_file_size_mb} MB{', sorted by ' + m.sort_order if m.sort_order else ''}, "
                             f"orphans older than {m.orphan_min_age_s:g}s" if m.enabled else "off"))
    if args.connect:
        _connect_check(cfg)
    return 0


def _connect_check(cfg: config_mod.Config) -> None:
    """Reach the brokers and the catalog as ``run`` would; a failure raises with its exit status."""
    from frazil.iceberg import catalog as iceberg_catalog
    from frazil.status import partitions, source_topics

    _quiet_kafka_client()
    topics = asyncio.run(source_topics(cfg.kafka))
    found = asyncio.run(partitions(cfg.kafka, topics)) if topics else []
    print(f"  reached    kafka: {len(topics)} source topic(s), {len(found)} partition(s)"
          + ("" if topics or not cfg.kafka.topic_pattern else " (none matches the pattern yet)"))
    catalog = iceberg_catalog.load(cfg.catalog, attempts=1, busy_timeout_s=CATALOG_WAIT_S)
    for table in cfg.tables:
        exists = _catalog_call(cfg, partial(catalog.table_exists, table.name))
        print(f"  reached    catalog: {table.name} " + ("exists" if exists else
                                                       "does not exist yet (created on start)" if table.create else
                                                       "DOES NOT EXIST and [table] create = false"))
        if not exists and not table.create:
            raise NotFound(f"table {table.name} does not exist and create = false; create it or set create = true")


def _catalog_call(cfg: config_mod.Config, call: Callable[[], T]) -> T:
    """A read from the catalog in a command: a catalog that cannot answer is one line, exit 4."""
    from pyiceberg.exceptions import NoSuchTableError

    from frazil.iceberg.catalog import describe

    try:
        return call()
    except NoSuchTableError as exc:
        raise NotFound(f"{exc}; `frazil run` creates the configured tables on start") from None
    except FrazilError:
        raise
    except Exception as exc:  # noqa: BLE001 - locked, down, refused: say so in one line
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise CatalogUnavailable(f"catalog {cfg.catalog.name} ({describe(cfg.catalog)}) did not answer: "
                                 f"{type(exc).__name__}: {first}") from None


def _offsets(args: argparse.Namespace) -> int:
    from frazil.iceberg import catalog as iceberg_catalog
    from frazil.iceberg import offsets
    from frazil.iceberg.committer import Committer
    from frazil.status import end_offsets, source_topics

    cfg = config_mod.load(args.config)
    logs.setup("WARNING")
    _quiet_kafka_client()
    if args.reset or args.skip or args.from_group:
        return _reset(cfg, args)
    catalog = iceberg_catalog.load(cfg.catalog, attempts=1, busy_timeout_s=CATALOG_WAIT_S)
    ends = asyncio.run(end_offsets(cfg.kafka, asyncio.run(source_topics(cfg.kafka))))
    marks: list[dict[tuple[str, int], int]] = []
    for table_cfg in cfg.tables:
        if not _catalog_call(cfg, partial(catalog.table_exists, table_cfg.name)):
            print(f"{table_cfg.name}: not created yet (`frazil run` creates it)\n")
            continue
        table = _catalog_call(cfg, partial(catalog.load_table, table_cfg.name))
        found = Committer(catalog, table_cfg.name, cfg.pipeline).held(table)
        stored = found.offsets
        marks.append(found.progress)
        if found.rolled_back:
            print(f"{table_cfg.name}: {found.rolled_back}")
        print(f"{table_cfg.name}\n{'topic':<24}{'partition':>10}{'table offset':>14}{'end offset':>12}{'lag':>10}")
        for tp in sorted(set(stored) | set(ends)):
            have, end = stored.get(tp), ends.get(tp)
            lag = "" if end is None else str(end - (have or 0))
            print(f"{tp[0]:<24}{tp[1]:>10}{'-' if have is None else have:>14}{'-' if end is None else end:>12}{lag:>10}")
    mark = offsets.merge_progress(*marks)
    if mark:
        print("pipeline watermark (every record below it is in every table that takes it): "
              + ", ".join(f"{t}[{p}]={o}" for (t, p), o in sorted(mark.items())))
    return 0


def _status(args: argparse.Namespace) -> int:
    from frazil.coordination.service import election_partition
    from frazil.iceberg import catalog as iceberg_catalog
    from frazil.iceberg.committer import Committer
    from frazil.status import end_offsets, group_members, source_topics, table_progress

    cfg = config_mod.load(args.config)
    logs.setup("WARNING")
    _quiet_kafka_client()
    topics = asyncio.run(source_topics(cfg.kafka))
    ends = asyncio.run(end_offsets(cfg.kafka, topics)) if topics else {}
    members = asyncio.run(group_members(cfg.kafka, cfg.kafka.group_id))
    catalog = iceberg_catalog.load(cfg.catalog, attempts=1, busy_timeout_s=CATALOG_WAIT_S)
    names = [t.name for t in cfg.tables]
    if cfg.dynamic is not None:
        names += [n for n in _catalog_call(cfg, partial(iceberg_catalog.dynamic_tables, catalog, cfg.dynamic))
                  if n not in names]
    tables: list[dict[str, Any]] = []
    for name in names:
        if not _catalog_call(cfg, partial(catalog.table_exists, name)):
            tables.append({"name": name, "exists": False})
            continue
        table = _catalog_call(cfg, partial(catalog.load_table, name))
        p = table_progress(table, cfg.pipeline, Committer(catalog, name, cfg.pipeline).held(table))
        merged = _merge_status(cfg, catalog, table)
        tables.append({"name": name, "exists": True, "snapshot_id": p.snapshot_id, "commit_id": p.commit_id,
                       "committed_ms": p.committed_ms, "valid_through_ms": p.valid_through_ms, "rows": p.rows,
                       "rolled_back": p.rolled_back, **({"merge": merged} if merged else {}),
                       "partitions": [{"topic": t, "partition": n, "table_offset": p.offsets.get((t, n)),
                                       "log_end": ends.get((t, n)),
                                       "lag": None if (t, n) not in ends else ends[(t, n)] - p.offsets.get((t, n), 0)}
                                      for t, n in sorted(set(p.offsets) | set(ends))]})
    if cfg.coordination.mode == "distributed" and topics:
        election = election_partition(tuple(topics) if cfg.kafka.topic_pattern else cfg.kafka.topics)
        coordinator = next((m.client_id + "@" + m.host for m in members if election in m.partitions), None)
    else:
        coordinator = "each process, for its own partitions" if members else None
    metrics = _local_metrics(cfg)
    report: dict[str, Any] = {"pipeline": cfg.pipeline, "mode": cfg.coordination.mode, "group": cfg.kafka.group_id,
              "members": [{"client_id": m.client_id, "host": m.host, "partitions": [list(tp) for tp in m.partitions]}
                          for m in members],
              "coordinator": coordinator, "tables": tables, "metrics": metrics}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"pipeline {cfg.pipeline} ({cfg.coordination.mode} mode), group {cfg.kafka.group_id}: "
          f"{len(members)} process(es) running" + ("" if members else " (none: is `frazil run` up?)"))
    for m in members:
        print(f"  {m.client_id}@{m.host} owns {len(m.partitions)} partition(s)")
    print(f"  coordinator: {coordinator or 'none'}")
    now_ms = time.time() * 1000
    for t in tables:
        if not t["exists"]:
            print(f"table {t['name']}: not created yet (`frazil run` creates it)")
            continue
        if t["committed_ms"]:
            when = (f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t['committed_ms'] / 1000))} "
                    f"({(now_ms - t['committed_ms']) / 1000:.0f}s ago)")
            vtts = (f", valid through {time.strftime('%H:%M:%S', time.localtime(t['valid_through_ms'] / 1000))}"
                    if t["valid_through_ms"] else "")
            last = f"last commit {t['commit_id']} at {when}{vtts}"
        else:
            last = f"no commit of pipeline {cfg.pipeline} yet"
        print(f"table {t['name']}: {last}; snapshot {_dash(t['snapshot_id'])}, {_dash(t['rows'])} rows")
        if t["rolled_back"]:
            print(f"  {t['rolled_back']}")
        if "merge" in t:
            m = t["merge"]
            print(f"  staging table of {m['into']}: merged through {m['merged']}; at most {m['waiting']} change(s) "
                  f"wait for the next Spark merge")
        print(f"  {'topic':<24}{'partition':>10}{'table offset':>14}{'log end':>12}{'lag':>10}")
        for r in t["partitions"]:
            print(f"  {r['topic']:<24}{r['partition']:>10}{_dash(r['table_offset']):>14}{_dash(r['log_end']):>12}"
                  f"{_dash(r['lag']):>10}")
    if metrics is not None:
        print("metrics " + ", ".join(f"{k}={v}" for k, v in metrics.items()))
    return 0


def _merge_status(cfg: config_mod.Config, catalog: Any, staging: Any) -> dict[str, Any] | None:
    """A staging table (``merge = "spark"``): its table, the merged mark and what waits."""
    from frazil.iceberg import mutations, offsets
    from frazil.spark import merge

    into = staging.properties.get(mutations.STAGING_PROPERTY)
    if not into or not _catalog_call(cfg, partial(catalog.table_exists, into)):
        return None
    target = _catalog_call(cfg, partial(catalog.load_table, into))
    found = merge.waiting(staging, target, cfg.pipeline)
    return {"into": into, "merged": offsets.encode(merge.merged_mark(target, cfg.pipeline)),
            "waiting": found.changes if found else 0}


def _reset(cfg: config_mod.Config, args: argparse.Namespace) -> int:
    """``offsets --skip TOPIC:PARTITION@OFFSET``: the table never takes that one record (a bad record
    when dead letters are off); ``offsets --reset TOPIC:PARTITION=OFFSET``: move one table's offset
    forward, skipping every record before it. Both after a confirmation, kept in the table with who
    and why, and logged. ``--from-group GROUP``: every partition at once, to a group's offsets."""
    from frazil.iceberg import catalog as iceberg_catalog
    from frazil.iceberg.committer import Committer, refuse_backward_reset, refuse_passed_skip
    from frazil.status import end_offsets

    if sum(map(bool, (args.reset, args.skip, args.from_group))) > 1:
        raise ConfigError("give one of --skip TOPIC:PARTITION@OFFSET, --reset TOPIC:PARTITION=OFFSET or "
                          "--from-group GROUP")
    option = "--skip" if args.skip else "--reset" if args.reset else "--from-group"
    names = [t.name for t in cfg.tables]
    table_name = args.table or (names[0] if len(names) == 1 else "")
    if not table_name:
        raise ConfigError(f"{option}: the pipeline has several tables ({', '.join(names)}); say which with --table")
    if table_name not in names and cfg.dynamic is None:
        raise ConfigError(f"--table {table_name}: pipeline {cfg.pipeline} lands {', '.join(names)}, not that table")
    if not args.reason:
        raise ConfigError(f"{option} needs --reason \"...\": it is kept in the table with who asked")
    if args.from_group:
        return _reset_from_group(cfg, args, table_name)
    spec = args.skip or args.reset
    m = re.fullmatch(r"(.+):(\d+)" + ("@" if args.skip else "=") + r"(\d+)", spec)
    if not m:
        raise ConfigError(f"{option} {spec!r}: write TOPIC:PARTITION" + ("@OFFSET, e.g. orders:3@1041" if args.skip
                                                                         else "=OFFSET, e.g. orders:3=1042"))
    tp, offset = (m.group(1), int(m.group(2))), int(m.group(3))
    ends = asyncio.run(end_offsets(cfg.kafka, [tp[0]]))
    if tp not in ends:
        raise NotFound(f"{tp[0]} has no partition {tp[1]}")
    if offset > ends[tp] or (args.skip and offset == ends[tp]):
        raise ConfigError(f"{option} {spec}: the partition ends at {ends[tp]}; there is no such record yet")
    catalog = iceberg_catalog.load(cfg.catalog, attempts=1, busy_timeout_s=CATALOG_WAIT_S)
    committer = Committer(catalog, table_name, cfg.pipeline)
    table = _catalog_call(cfg, partial(catalog.load_table, table_name))
    stored = committer.held(table).offsets
    before = stored.get(tp)
    # refused before asking, by the committer's own checks (it checks again when it commits)
    if args.skip:
        refuse_passed_skip(table_name, stored, tp, offset)
    else:
        refuse_backward_reset(table_name, stored, {tp: offset})
    if args.skip:
        print(f"{table_name}: the record {tp[0]}[{tp[1]}]@{offset} will never land in this table (reason: "
              f"{args.reason}); the table holds that partition up to {before if before is not None else 'nothing yet'}. "
              f"Restart `frazil run` for pipeline {cfg.pipeline} afterwards.")
    else:
        print(f"{table_name}: {tp[0]}[{tp[1]}] from {before if before is not None else 'nothing stored'} to {offset}: "
              f"{offset - (before or 0)} record(s) will never land in this table (reason: {args.reason}). Stop "
              f"`frazil run` for pipeline {cfg.pipeline} first.")
    if not _confirmed(args, table_name):
        return 1
    by = _operator()
    if args.skip:
        _catalog_call(cfg, partial(committer.skip, tp, offset, reason=args.reason, by=by,
                                   at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
        print(f"skip noted in {table_name} (property frazil.skip.{cfg.pipeline})")
        return 0
    result = _catalog_call(cfg, partial(committer.skip_to, {tp: offset}, reason=args.reason, by=by))
    print(f"reset: commit {result.commit_id}, snapshot {result.snapshot_id}; {table_name} now holds "
          f"{tp[0]}[{tp[1]}] up to {offset}")
    return 0


def _confirmed(args: argparse.Namespace, table_name: str) -> bool:
    """``--yes``, or the table's name typed on a terminal."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise ConfigError("moving offsets asks for confirmation on a terminal; pass --yes to confirm without one")
    if input(f"type the table name ({table_name}) to confirm: ").strip() != table_name:
        print("not confirmed; nothing changed")
        return False
    return True


def _operator() -> str:
    """Who moves offsets, as the table keeps it: user@host (the uid when it has no passwd entry)."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):   # a container's uid with no passwd entry and no $USER
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def _reset_from_group(cfg: config_mod.Config, args: argparse.Namespace, table_name: str) -> int:
    """``offsets --from-group GROUP``: the table's offsets move forward to what another consumer
    group committed (a Kafka Connect sink's ``connect-<name>`` when moving to frazil), so frazil
    does not land again what the group's consumer already landed. Partitions where the table is
    already at or past the group stay; the group must have no members."""
    from frazil.iceberg import catalog as iceberg_catalog
    from frazil.iceberg.committer import Committer
    from frazil.status import group_offsets, source_topics

    topics = asyncio.run(source_topics(cfg.kafka))
    group = asyncio.run(group_offsets(cfg.kafka, args.from_group, topics))
    if not group:
        raise NotFound(f"consumer group {args.from_group!r} has no committed offsets for {', '.join(topics)}; check "
                       "the group's name (a Kafka Connect sink's is connect-<connector name>)")
    catalog = iceberg_catalog.load(cfg.catalog, attempts=1, busy_timeout_s=CATALOG_WAIT_S)
    committer = Committer(catalog, table_name, cfg.pipeline)
    if not _catalog_call(cfg, partial(catalog.table_exists, table_name)):
        raise NotFound(f"table {table_name} does not exist yet: create it (`frazil run` with no records to read, or the "
                       "connector's table) before moving its offsets")
    stored = committer.held(_catalog_call(cfg, partial(catalog.load_table, table_name))).offsets
    moves = {tp: off for tp, off in sorted(group.items()) if stored.get(tp, 0) < off}
    print(f"{table_name}: offsets from consumer group {args.from_group} (reason: {args.reason})")
    print(f"  {'topic':<24}{'partition':>10}{'table offset':>14}{'group offset':>14}  action")
    for tp, off in sorted(group.items()):
        have = stored.get(tp)
        action = f"move, {off - (have or 0)} record(s) never land here" if tp in moves else "keep (table at or past it)"
        print(f"  {tp[0]:<24}{tp[1]:>10}{_dash(have):>14}{off:>14}  {action}")
    if not moves:
        print("nothing to move")
        return 0
    print(f"Stop `frazil run` for pipeline {cfg.pipeline} first; the consumer of group {args.from_group} must have "
          "committed everything it read (for a Kafka Connect sink: its last commit landed).")
    if not _confirmed(args, table_name):
        return 1
    result = _catalog_call(cfg, partial(committer.skip_to, moves, reason=args.reason, by=_operator()))
    print(f"reset: commit {result.commit_id}, snapshot {result.snapshot_id}; {len(moves)} partition(s) of {table_name} "
          f"moved to the offsets of {args.from_group}")
    return 0


def _import_kc(args: argparse.Namespace) -> int:
    from frazil import kafka_connect

    try:
        name, connector = kafka_connect.read(args.connector.read_text(), args.connector.name)
        done = kafka_connect.convert(name, connector, pipeline=args.pipeline, bootstrap_servers=args.bootstrap_servers,
                                     dynamic_namespace=args.dynamic_namespace)
    except FileNotFoundError:
        raise ConfigError(f"{args.connector} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:   # a folder, no permission, not text
        raise ConfigError(f"{args.connector} cannot be read: {exc}") from None
    except kafka_connect.ConnectorConfigError as exc:
        raise ConfigError(f"{args.connector}: {exc}") from None
    try:   # what is written must be a config frazil accepts (a placeholder in each secret's variable)
        kafka_connect.check(done, (args.output or Path("frazil.toml")).resolve().parent)
        verdict = "accepted by `frazil config check`"
    except ConfigError as exc:
        verdict = f"NOT accepted as it is: {exc}"
    if args.output:
        args.output.write_text(done.toml)
    else:
        print(done.toml)
    report = sys.stderr if not args.output else sys.stdout
    print(f"import-kc: {len(done.carried)} connector setting(s) carried over; the config is {verdict}"
          + (f"; written to {args.output}" if args.output else ""), file=report)
    if done.not_carried:
        print(f"not carried over, or carried over with another behaviour ({len(done.not_carried)}):", file=report)
        for key, why in done.not_carried:
            print(f"  {key}: {why}", file=report)
    return 0 if verdict.startswith("accepted") else 2


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _local_metrics(cfg: config_mod.Config) -> dict[str, Any] | None:
    """What this host's ``frazil run`` says on its metrics endpoint (None when metrics are off)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    if not cfg.metrics.port:
        return None
    url = f"http://{cfg.metrics.host}:{cfg.metrics.port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            text = response.read().decode()
    except OSError as exc:
        return {"endpoint": url, "answering": False, "error": str(exc)}
    wanted = {"frazil_coordinator": "coordinating", "frazil_paused": "paused", "frazil_memory_bytes": "memory_bytes",
              "frazil_commit_failing_seconds": "commit_failing_seconds"}
    out: dict[str, Any] = {"endpoint": url, "answering": True}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in wanted:
                    out[wanted[sample.name]] = max(out.get(wanted[sample.name], 0), sample.value)
    except ValueError:
        return {"endpoint": url, "answering": False, "error": "not Prometheus metrics: is another program on that port?"}
    return out


def _txlog(args: argparse.Namespace) -> int:
    import json

    from frazil.txlog import recover

    found = recover(args.dir, read_only=True)
    state = found.state
    print(f"transaction log {args.dir}")
    print(f"  checkpoint   {found.checkpoint.name if found.checkpoint else 'none'}")
    print(f"  last lsn     {state.lsn} ({found.replayed} record(s) after the checkpoint)")
    for name, position, why in found.truncated:
        print(f"  torn tail    {name} at byte {position}: {why} (recovery will cut it)")
    for table, reports in sorted(state.pending.items()):
        print(f"  pending      {table}: {sum(len(r['files']) for r in reports)} file(s) written, not committed")
    for _, intent in sorted(state.unresolved().items()):
        print(f"  unresolved   {intent['commit_id']} -> {intent['table']} ({len(intent['files'])} file(s)); "
              "resolved against the catalog on start")
    for table, offs in sorted(state.offsets.items()):
        print(f"  offsets      {table}: {json.dumps(offs, sort_keys=True)}")
    shown = found.records[-args.tail:] if args.tail else []
    if shown:
        print(f"  last {len(shown)} record(s):")
    for name, position, record in shown:
        print(f"    {name}@{position}  {json.dumps(record, sort_keys=True)}")
    return 0


def _maintain(args: argparse.Namespace) -> int:
    from frazil.spark import session
    from frazil.spark.jobs import TableJobs
    from frazil.spark.schedule import FULL_RUN, Job
    from frazil.txlog import recover

    cfg = config_mod.load(args.config)
    logs.setup(cfg.log_level, cfg.log_format)
    names = [j.strip() for j in args.jobs.split(",") if j.strip()]
    unknown = [n for n in names if n not in {j.value for j in Job}]
    if unknown:
        raise ConfigError(f"--jobs: unknown job(s) {', '.join(unknown)}; choose from {', '.join(j.value for j in FULL_RUN)}")
    jobs = tuple(Job(n) for n in names) if names else FULL_RUN
    if Job.ORPHANS in jobs and cfg.txlog_dir.exists() and not args.force:
        unresolved = recover(cfg.txlog_dir, read_only=True).state.unresolved()
        if unresolved:
            raise ConfigError(f"the transaction log {cfg.txlog_dir} holds {len(unresolved)} commit(s) whose data files "
                              "are written but not settled; removing orphan files now could delete them. Start "
                              "`frazil run` once to settle them, or pass --force")
    missing = session.available()
    if missing:
        raise ConfigError(f"maintenance runs on Spark, but {missing}")
    print(f"maintenance of {cfg.table.name}: {', '.join(j.value for j in jobs)} (starting Spark, {cfg.spark.master})",
          flush=True)
    table_jobs = TableJobs(session.get(session.for_config(cfg)), cfg.catalog.name, cfg.table.name, cfg.maintenance)
    try:
        results, failed = table_jobs.run(jobs)
    finally:
        session.stop()
    for r in results:
        print(f"  {r.job.value:<32}{r.seconds:7.1f}s  " + (", ".join(f"{k}={v}" for k, v in r.counts.items())
                                                          or "nothing to do"))
    for job in failed:
        print(f"  {job.value:<32}  FAILED (see the log above)")
    return 1 if failed else 0


def _backfill(args: argparse.Namespace) -> int:
    from frazil.backfill import backfill

    cfg = config_mod.load(args.config)
    logs.setup(cfg.log_level, cfg.log_format)
    stats = backfill(cfg, batch_rows=args.batch_rows, memory_mb=args.memory_mb)
    print(f"backfill {cfg.pipeline}: {stats.rows_committed} rows committed in {stats.commits} commit(s)")
    return 0


def _quiet_kafka_client() -> None:
    """For one-shot commands: aiokafka's own connection errors reach the user as one line of ours
    (``kafka_clients.connect`` keeps the reason), not as log lines before it."""
    quiet = logging.getLogger("aiokafka")
    quiet.propagate = False
    if not any(isinstance(h, logging.NullHandler) for h in quiet.handlers):
        quiet.addHandler(logging.NullHandler())   # else Python's last-resort handler prints them raw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="frazil", description="Kafka into Apache Iceberg, exactly once.")
    parser.add_argument("--version", action="version", version=f"frazil {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run the pipeline in the foreground until SIGTERM")
    _config_arg(p)
    p.set_defaults(func=_run)
    config_cmd = sub.add_parser("config", help="work with a config file: config check")
    for p in (config_cmd.add_subparsers(dest="config_command", required=True).add_parser(
                  "check", help="validate a config file and print what it says (secrets masked)"),
              sub.add_parser("check-config", help="the same as `config check`")):
        _config_arg(p)
        p.add_argument("--connect", action="store_true",
                       help="also reach the brokers and the catalog, and look for the source topics and tables")
        p.set_defaults(func=_check)
    p = sub.add_parser("status", help="per table: last commit, snapshot, rows, offsets and lag; the group's members "
                                      "and which one coordinates; the local metrics endpoint")
    _config_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=_status)
    p = sub.add_parser("offsets", help="each table's stored offsets against the topics' end offsets, and the pipeline's "
                                       "watermark; --reset moves one forward past records skipped on purpose")
    _config_arg(p)
    p.add_argument("--reset", default="", metavar="TOPIC:PARTITION=OFFSET",
                   help="move the table's offset of one partition forward to OFFSET (the records before it are never "
                        "landed in that table), after a confirmation; stop `frazil run` first")
    p.add_argument("--skip", default="", metavar="TOPIC:PARTITION@OFFSET",
                   help="the table never takes the record at OFFSET (a bad record when dead letters are off), after a "
                        "confirmation; the pipeline leaves it out when it reads it again")
    p.add_argument("--from-group", default="", metavar="GROUP",
                   help="move the table's offsets forward to what consumer group GROUP committed (e.g. connect-NAME, "
                        "when moving from Kafka Connect)")
    p.add_argument("--table", default="", help="with --skip/--reset: which table (needed when the pipeline has several)")
    p.add_argument("--reason", default="", help="with --skip/--reset: why (kept in the table)")
    p.add_argument("--yes", action="store_true", help="with --skip/--reset: confirm without a prompt")
    p.set_defaults(func=_offsets)
    p = sub.add_parser("import-kc", help="turn an Apache Iceberg Kafka Connect sink config (.json or .properties) into a "
                                         "frazil config, listing every setting it cannot carry over")
    p.add_argument("connector", type=Path, help="the connector's config: the JSON for Connect's REST API, or .properties")
    p.add_argument("--bootstrap-servers", default="", help="the Kafka brokers (Connect takes them from its worker "
                                                          "config; needed unless iceberg.kafka.bootstrap.servers is set)")
    p.add_argument("--pipeline", default="", help="pipeline name (default: the connector's name)")
    p.add_argument("--dynamic-namespace", default="", help="dynamic routing: the namespace of the tables the route "
                                                          "field names (frazil's template fixes it)")
    p.add_argument("--output", "-o", type=Path, help="write the config here (default: stdout, the report to stderr)")
    p.set_defaults(func=_import_kc)
    p = sub.add_parser("txlog", help="print a transaction log: checkpoint, state and last records (read-only)")
    p.add_argument("--dir", type=Path, required=True, help="the transaction log directory")
    p.add_argument("--tail", type=int, default=20, help="how many of the last records to print (default 20)")
    p.set_defaults(func=_txlog)
    jobs = "rewrite_data_files, rewrite_position_delete_files, rewrite_manifests, expire_snapshots, remove_orphan_files"
    p = sub.add_parser("maintain", help=f"run table maintenance on Spark now: {jobs}")
    _config_arg(p)
    p.add_argument("--jobs", default="", help=f"comma-separated subset of: {jobs} (default: all, in that order)")
    p.add_argument("--force", action="store_true",
                   help="remove orphan files even if the transaction log holds unsettled commits")
    p.set_defaults(func=_maintain)
    p = sub.add_parser("compact", help="rewrite small data files into bigger ones (maintain --jobs rewrite_data_files)")
    _config_arg(p)
    p.set_defaults(func=_maintain, jobs="rewrite_data_files", force=False)
    p = sub.add_parser("backfill", help="land everything the topics hold now in big flushes written by Spark, then stop")
    _config_arg(p)
    p.add_argument("--batch-rows", type=int, default=2_000_000, help="rows per flush (default 2,000,000)")
    p.add_argument("--memory-mb", type=int, default=2048, help="memory budget for the buffer (default 2048)")
    p.set_defaults(func=_backfill)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"frazil: configuration error: {exc}", file=sys.stderr)
        return exc.exit_code
    except FrazilError as exc:
        if args.command == "run":
            log.error("%s", exc)   # the daemon's log says why it stopped, too
        print(f"frazil: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KafkaError as exc:   # a client call after connecting (the brokers went away): one line, not a traceback
        error = KafkaUnavailable(f"Kafka: {type(exc).__name__}: {exc}")
        print(f"frazil: KafkaUnavailable: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130

