"""Commands that look and change nothing: ``status`` (the tables, the group, the metrics endpoint),
``offsets`` without an option (each table's offsets and the pipeline's watermark) and ``txlog``."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from frazil import logs
from frazil.cli.oneshot import catalog_call, dash, load_catalog, pipeline_tables, quiet_kafka_client

if TYPE_CHECKING:
    from frazil import config as config_mod
    from frazil.status import PartitionRow


def offsets(args: argparse.Namespace) -> int:
    from frazil import config as config_mod
    from frazil.cli.actions import move_offsets
    from frazil.iceberg.committer import Committer
    from frazil.ingest.routing import Router
    from frazil.status import end_offsets, restart, source_topics, table_partitions

    cfg = config_mod.load(args.config)
    logs.setup("WARNING")
    quiet_kafka_client()
    if args.reset or args.skip or args.from_group:
        return move_offsets(cfg, args)
    catalog = load_catalog(cfg)
    tables = pipeline_tables(cfg, catalog)
    ends = asyncio.run(end_offsets(cfg.kafka, asyncio.run(source_topics(cfg.kafka))))
    router = Router(cfg.tables, cfg.dynamic)
    held = {name: Committer(catalog, name, cfg.pipeline).held(table) for name, table in tables.items()
            if table is not None}
    if not tables:
        print("no table yet: [dynamic] creates each table when a record first names it\n")
    for name, table in tables.items():
        if table is None:
            print(f"{name}: not created yet (`frazil run` creates it)\n")
            continue
        found = held[name]
        if found.rolled_back:
            print(f"{name}: {found.rolled_back}")
        print(name)
        _print_partitions(name, table_partitions(name, found.offsets, ends, router), "end offset")
    found_restart = restart(sorted(ends), held, router)
    print(f"pipeline {cfg.pipeline}: the watermark (every record below it is in every table that takes it) and where "
          "a restart reads each partition from")
    print(f"  {'topic':<24}{'partition':>10}{'watermark':>12}{'resumes at':>12}{'end offset':>12}{'to read':>10}")
    for tp, end in sorted(ends.items()):
        at = found_restart.resume.get(tp)
        print(f"  {tp[0]:<24}{tp[1]:>10}{dash(found_restart.watermark.get(tp)):>12}"
              f"{cfg.kafka.auto_offset_reset if at is None else at:>12}{end:>12}"
              f"{dash(None if at is None else end - at):>10}")
    print("  a restart reads each partition from the lowest offset a table that takes its topic still needs, never\n"
          "  below the watermark, and each table skips what it holds; a partition no table knows starts at the "
          f"{cfg.kafka.auto_offset_reset} offset")
    return 0


def _print_partitions(table: str, rows: list[PartitionRow], end_label: str) -> None:
    """A table's partitions with its offset, the log end and the lag, and what the marks mean."""
    print(f"  {'topic':<24}{'partition':>10}{'table offset':>14}{end_label:>12}{'lag':>10}")
    for r in rows:
        lag = dash(r.lag) + ("*" if r.takes == "some records" and r.lag else "")
        print(f"  {r.topic:<24}{r.partition:>10}{dash(r.table_offset):>14}{dash(r.end):>12}{lag:>10}")
    if not rows:
        print("  (it takes no record of the source topics now)")
    some = sorted({r.topic for r in rows if r.takes == "some records" and r.lag})
    if some:
        print(f"  * {table} takes only some records of {', '.join(some)} (a field of each record decides):\n"
              "    its offset moves only with a record it takes, so the lag also counts records it never takes; "
              "the pipeline's watermark (frazil offsets) says what has landed")
    gone = sorted({r.topic for r in rows if r.takes == "no record"})
    if gone:
        print(f"  {table} takes no record of {', '.join(gone)} now: offsets kept from an earlier config")


def status(args: argparse.Namespace) -> int:
    from frazil import config as config_mod
    from frazil.coordination.mode import election_partition
    from frazil.iceberg.committer import Committer
    from frazil.ingest.routing import Router
    from frazil.status import end_offsets, group_members, source_topics, table_partitions, table_progress

    cfg = config_mod.load(args.config)
    logs.setup("WARNING")
    quiet_kafka_client()
    topics = asyncio.run(source_topics(cfg.kafka))
    ends = asyncio.run(end_offsets(cfg.kafka, topics)) if topics else {}
    members = asyncio.run(group_members(cfg.kafka, cfg.kafka.group_id))
    catalog = load_catalog(cfg)
    router = Router(cfg.tables, cfg.dynamic)
    tables: list[dict[str, Any]] = []
    rows_of: dict[str, list[PartitionRow]] = {}
    for name, table in pipeline_tables(cfg, catalog).items():
        if table is None:
            tables.append({"name": name, "exists": False})
            continue
        p = table_progress(table, cfg.pipeline, Committer(catalog, name, cfg.pipeline).held(table))
        merged = _merge_status(cfg, catalog, table)
        rows = rows_of[name] = table_partitions(name, p.offsets, ends, router)
        tables.append({"name": name, "exists": True, "snapshot_id": p.snapshot_id, "commit_id": p.commit_id,
                       "committed_ms": p.committed_ms, "valid_through_ms": p.valid_through_ms, "rows": p.rows,
                       "rows_exact": p.rows_exact, "rolled_back": p.rolled_back,
                       **({"merge": merged} if merged else {}),
                       "partitions": [{"topic": r.topic, "partition": r.partition, "table_offset": r.table_offset,
                                       "log_end": r.end, "lag": r.lag, "takes": r.takes} for r in rows]})
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
        count = f"{'' if t['rows_exact'] else 'at most '}{dash(t['rows'])} rows"
        print(f"table {t['name']}: {last}; snapshot {dash(t['snapshot_id'])}, {count}")
        if t["rolled_back"]:
            print(f"  {t['rolled_back']}")
        if "merge" in t:
            m = t["merge"]
            print(f"  staging table of {m['into']}: merged through {m['merged']}; at most {m['waiting']} change(s) "
                  f"wait for the next Spark merge")
        _print_partitions(t["name"], rows_of[t["name"]], "log end")
    if metrics is not None:
        print("metrics " + ", ".join(f"{k}={v}" for k, v in metrics.items()))
    return 0


def _merge_status(cfg: config_mod.Config, catalog: Any, staging: Any) -> dict[str, Any] | None:
    """A staging table (``merge = "spark"``): its table, the merged mark and what waits."""
    from frazil.iceberg import mutations, offsets
    from frazil.spark import merge

    into = staging.properties.get(mutations.STAGING_PROPERTY)
    if not into or not catalog_call(cfg, partial(catalog.table_exists, into)):
        return None
    target = catalog_call(cfg, partial(catalog.load_table, into))
    found = merge.waiting(staging, target, cfg.pipeline)
    return {"into": into, "merged": offsets.encode(merge.merged_mark(target, cfg.pipeline)),
            "waiting": found.changes if found else 0}


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
        return {"endpoint": url, "answering": False,
                "error": "not Prometheus metrics: is another program on that port?"}
    return out


def txlog(args: argparse.Namespace) -> int:
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
