"""The ``frazil`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from frazil import config as config_mod
from frazil import logs
from frazil.errors import ConfigError, FrazilError

log = logging.getLogger("frazil")


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", type=Path, default=Path("frazil.toml"), help="TOML config (default: frazil.toml)")


def _run(args: argparse.Namespace) -> int:
    from frazil import daemon

    cfg = config_mod.load(args.config)
    logs.setup(cfg.log_level, cfg.log_format)
    daemon.run(cfg)
    return 0


def _check(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    print(f"{args.config}: ok")
    print(f"  pipeline   {cfg.pipeline} (commit every {cfg.commit_interval_s:g}s, "
          f"at most {cfg.max_buffer_records} buffered records)")
    topics = f"topic_pattern={cfg.kafka.topic_pattern}" if cfg.kafka.topic_pattern else f"topics={','.join(cfg.kafka.topics)}"
    print(f"  kafka      {cfg.kafka.bootstrap_servers} {topics} group={cfg.kafka.group_id}")
    print(f"  catalog    {cfg.catalog.name} {cfg.catalog.properties.get('uri', cfg.catalog.properties.get('type'))}")
    for table in cfg.tables:
        takes = " ".join(filter(None, (f"topics~{table.topics}" if table.topics else "",
                                       f"{'.'.join(table.route_field)}~{table.route}" if table.route_field else "")))
        units = ",".join(f"{c.name}:{c.unit}" for c in table.columns if c.unit)
        rounded = ",".join(c.name for c in table.columns if c.rounding)
        print(f"  table      {table.name} columns={len(table.columns) or 'inferred'} metadata_columns={table.metadata_columns} "
              f"partition_by={list(table.partition_by)} takes={takes or 'every record'} "
              f"unknown_fields={table.unknown_fields}" + (f" units={units}" if units else "")
              + (f" rounding(half_even)={rounded}" if rounded else "")
              + (" case_insensitive" if table.case_insensitive else ""))
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
    return 0


def _offsets(args: argparse.Namespace) -> int:
    from frazil.iceberg import catalog as iceberg_catalog
    from frazil.iceberg import offsets
    from frazil.iceberg.committer import Committer
    from frazil.status import end_offsets, source_topics

    cfg = config_mod.load(args.config)
    logs.setup("WARNING")
    catalog = iceberg_catalog.load(cfg.catalog)
    ends = asyncio.run(end_offsets(cfg.kafka.bootstrap_servers, asyncio.run(source_topics(cfg.kafka))))
    marks: list[dict[tuple[str, int], int]] = []
    for table_cfg in cfg.tables:
        if not catalog.table_exists(table_cfg.name):
            print(f"{table_cfg.name}: not created yet (created on its first records)\n")
            continue
        found = Committer(catalog, table_cfg.name, cfg.pipeline).held(catalog.load_table(table_cfg.name))
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
    from frazil import daemon

    cfg = config_mod.load(args.config)
    logs.setup(cfg.log_level, cfg.log_format)
    stats = daemon.backfill(cfg, batch_rows=args.batch_rows, memory_mb=args.memory_mb)
    print(f"backfill {cfg.pipeline}: {stats.rows_committed} rows committed in {stats.commits} commit(s)")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from frazil import demo

    logs.setup("WARNING")
    return demo.main(records=args.records, workdir=args.workdir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="frazil", description="Kafka into Apache Iceberg, exactly once.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run the pipeline in the foreground until SIGTERM")
    _config_arg(p)
    p.set_defaults(func=_run)
    p = sub.add_parser("check-config", help="validate a config file and print what it says")
    _config_arg(p)
    p.set_defaults(func=_check)
    p = sub.add_parser("offsets", help="each table's stored offsets against the topics' end offsets, and the pipeline's watermark")
    _config_arg(p)
    p.set_defaults(func=_offsets)
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
    p = sub.add_parser("demo", help="end to end on a local broker and warehouse (used by make demo)")
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--workdir", type=Path, default=Path(".run/demo"))
    p.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"frazil: configuration error: {exc}", file=sys.stderr)
        return 2
    except FrazilError as exc:
        log.error("%s", exc)
        print(f"frazil: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
