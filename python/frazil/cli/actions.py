"""Commands that do something to the pipeline: ``run``, ``backfill``, ``maintain``/``compact``,
and ``offsets --skip/--reset/--from-group`` (an operator moving a table's offsets on purpose, after
a confirmation, kept in the table with who and why)."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from functools import partial
from typing import TYPE_CHECKING

from frazil import logs
from frazil.cli.oneshot import catalog_call, dash, load_catalog, pipeline_tables
from frazil.errors import ConfigError, NotFound

if TYPE_CHECKING:
    from frazil import config as config_mod


def run(args: argparse.Namespace) -> int:
    from frazil import config as config_mod
    from frazil import daemon

    cfg = config_mod.load(args.config)
    logs.setup(cfg.log_level, cfg.log_format)
    daemon.run(cfg)
    return 0


def backfill(args: argparse.Namespace) -> int:
    from frazil import config as config_mod
    from frazil.backfill import backfill

    cfg = config_mod.load(args.config)
    logs.setup(cfg.log_level, cfg.log_format)
    stats = backfill(cfg, batch_rows=args.batch_rows, memory_mb=args.memory_mb)
    print(f"backfill {cfg.pipeline}: {stats.rows_committed} rows committed in {stats.commits} commit(s)")
    return 0


def maintain(args: argparse.Namespace) -> int:
    """``maintain`` (and ``compact``: ``--jobs rewrite_data_files``): the jobs on every table of the
    pipeline that exists (configured, the tables their changes merge into, ``[dynamic]``-created),
    or on the one ``--table`` names, one table after the other on one Spark session."""
    from frazil import config as config_mod
    from frazil.spark import session
    from frazil.spark.jobs import TableJobs
    from frazil.spark.schedule import FULL_RUN, Job
    from frazil.txlog import recover

    cfg = config_mod.load(args.config)
    logs.setup(cfg.log_level, cfg.log_format)
    names = [j.strip() for j in args.jobs.split(",") if j.strip()]
    unknown = [n for n in names if n not in {j.value for j in Job}]
    if unknown:
        raise ConfigError(f"--jobs: unknown job(s) {', '.join(unknown)}; choose from "
                          f"{', '.join(j.value for j in FULL_RUN)}")
    jobs = tuple(Job(n) for n in names) if names else FULL_RUN
    tables = _tables_to_maintain(cfg, args.table)
    if not tables:
        print(f"pipeline {cfg.pipeline} has no table yet; nothing to maintain")
        return 0
    if Job.ORPHANS in jobs and cfg.txlog_dir.exists() and not args.force:
        unresolved = [i for i in recover(cfg.txlog_dir, read_only=True).state.unresolved().values()
                      if i["table"] in tables]
        if unresolved:
            raise ConfigError(f"the transaction log {cfg.txlog_dir} holds {len(unresolved)} commit(s) to "
                              f"{', '.join(sorted({i['table'] for i in unresolved}))} whose data files are written but "
                              "not settled; removing orphan files now could delete them. Start `frazil run` once to "
                              "settle them, or pass --force")
    missing = session.available()
    if missing:
        raise ConfigError(f"maintenance runs on Spark, but {missing}")
    print(f"maintenance of {', '.join(tables)}: {', '.join(j.value for j in jobs)} "
          f"(starting Spark, {cfg.spark.master})", flush=True)
    failed_on: list[str] = []
    try:
        spark = session.get(session.for_config(cfg))
        for name in tables:
            results, failed = TableJobs(spark, cfg.catalog.name, name, cfg.maintenance).run(jobs)
            print(f"table {name}")
            for r in results:
                print(f"  {r.job.value:<32}{r.seconds:7.1f}s  " + (", ".join(f"{k}={v}" for k, v in r.counts.items())
                                                                  or "nothing to do"))
            for job in failed:
                print(f"  {job.value:<32}  FAILED (see the log above)")
            sys.stdout.flush()
            if failed:
                failed_on.append(name)
    finally:
        session.stop()
    if failed_on and len(tables) > 1:
        print(f"jobs failed on {len(failed_on)} of {len(tables)} table(s): {', '.join(failed_on)}")
    return 1 if failed_on else 0


def _tables_to_maintain(cfg: config_mod.Config, only: str) -> list[str]:
    """The tables of the pipeline that exist, each said when it does not; ``only``: that one (an
    unknown name or a table not created yet is exit 5)."""
    tables = pipeline_tables(cfg, load_catalog(cfg), merge_targets=True)
    if only:
        if only not in tables:
            raise NotFound(f"--table {only}: pipeline {cfg.pipeline} has no such table; its tables are "
                           f"{', '.join(tables) or 'none yet'}")
        if tables[only] is None:
            raise NotFound(f"--table {only}: not created yet (`frazil run` creates it)")
        return [only]
    for name, table in tables.items():
        if table is None:
            print(f"table {name}: not created yet; nothing to maintain")
    return [name for name, table in tables.items() if table is not None]


def move_offsets(cfg: config_mod.Config, args: argparse.Namespace) -> int:
    """``offsets --skip TOPIC:PARTITION@OFFSET``: the table never takes that one record (a bad record
    when dead letters are off); ``offsets --reset TOPIC:PARTITION=OFFSET``: move one table's offset
    forward, skipping every record before it. Both after a confirmation, kept in the table with who
    and why, and logged. ``--from-group GROUP``: every partition at once, to a group's offsets."""
    from frazil.iceberg import operator_moves
    from frazil.iceberg.commits import refuse_backward_reset, refuse_passed_skip
    from frazil.iceberg.committer import Committer
    from frazil.status import end_offsets

    if sum(map(bool, (args.reset, args.skip, args.from_group))) > 1:
        raise ConfigError("give one of --skip TOPIC:PARTITION@OFFSET, --reset TOPIC:PARTITION=OFFSET or "
                          "--from-group GROUP")
    option = "--skip" if args.skip else "--reset" if args.reset else "--from-group"
    names = [t.name for t in cfg.tables]
    table_name = args.table or (names[0] if len(names) == 1 else "")
    if not table_name:
        several = (f"the pipeline has several tables ({', '.join(names)})" if names
                   else "the records name the pipeline's tables ([dynamic])")
        raise ConfigError(f"{option}: {several}; say which with --table")
    if table_name not in names and cfg.dynamic is None:
        raise ConfigError(f"--table {table_name}: pipeline {cfg.pipeline} lands {', '.join(names)}, not that table")
    if not args.reason:
        raise ConfigError(f"{option} needs --reason \"...\": it is kept in the table with who asked")
    if args.from_group:
        return _from_group(cfg, args, table_name)
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
    catalog = load_catalog(cfg)
    committer = Committer(catalog, table_name, cfg.pipeline)
    table = catalog_call(cfg, partial(catalog.load_table, table_name))
    stored = committer.held(table).offsets
    before = stored.get(tp)
    # refused before asking, by the committer's own checks (it checks again when it commits)
    if args.skip:
        refuse_passed_skip(table_name, stored, tp, offset)
    else:
        refuse_backward_reset(table_name, stored, {tp: offset})
    if args.skip:
        print(f"{table_name}: the record {tp[0]}[{tp[1]}]@{offset} will never land in this table (reason: "
              f"{args.reason}); the table holds that partition up to "
              f"{before if before is not None else 'nothing yet'}. "
              f"Restart `frazil run` for pipeline {cfg.pipeline} afterwards.")
    else:
        print(f"{table_name}: {tp[0]}[{tp[1]}] from {before if before is not None else 'nothing stored'} to {offset}: "
              f"{offset - (before or 0)} record(s) will never land in this table (reason: {args.reason}). Stop "
              f"`frazil run` for pipeline {cfg.pipeline} first.")
    if not _confirmed(args, table_name):
        return 1
    by = _operator()
    if args.skip:
        catalog_call(cfg, partial(operator_moves.skip, committer, tp, offset, reason=args.reason, by=by,
                                  at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
        print(f"skip noted in {table_name} (property frazil.skip.{cfg.pipeline})")
        return 0
    result = catalog_call(cfg, partial(operator_moves.skip_to, committer, {tp: offset}, reason=args.reason, by=by))
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


def _from_group(cfg: config_mod.Config, args: argparse.Namespace, table_name: str) -> int:
    """``offsets --from-group GROUP``: the table's offsets move forward to what another consumer
    group committed (a Kafka Connect sink's ``connect-<name>`` when moving to frazil), so frazil
    does not land again what the group's consumer already landed. Partitions where the table is
    already at or past the group stay; the group must have no members."""
    from frazil.iceberg import operator_moves
    from frazil.iceberg.committer import Committer
    from frazil.status import group_offsets, source_topics

    topics = asyncio.run(source_topics(cfg.kafka))
    group = asyncio.run(group_offsets(cfg.kafka, args.from_group, topics))
    if not group:
        raise NotFound(f"consumer group {args.from_group!r} has no committed offsets for {', '.join(topics)}; check "
                       "the group's name (a Kafka Connect sink's is connect-<connector name>)")
    catalog = load_catalog(cfg)
    committer = Committer(catalog, table_name, cfg.pipeline)
    if not catalog_call(cfg, partial(catalog.table_exists, table_name)):
        raise NotFound(f"table {table_name} does not exist yet: create it (`frazil run` with no records to read, or "
                       "the connector's table) before moving its offsets")
    stored = committer.held(catalog_call(cfg, partial(catalog.load_table, table_name))).offsets
    moves = {tp: off for tp, off in sorted(group.items()) if stored.get(tp, 0) < off}
    print(f"{table_name}: offsets from consumer group {args.from_group} (reason: {args.reason})")
    print(f"  {'topic':<24}{'partition':>10}{'table offset':>14}{'group offset':>14}  action")
    for tp, off in sorted(group.items()):
        have = stored.get(tp)
        action = f"move, {off - (have or 0)} record(s) never land here" if tp in moves else "keep (table at or past it)"
        print(f"  {tp[0]:<24}{tp[1]:>10}{dash(have):>14}{off:>14}  {action}")
    if not moves:
        print("nothing to move")
        return 0
    print(f"Stop `frazil run` for pipeline {cfg.pipeline} first; the consumer of group {args.from_group} must have "
          "committed everything it read (for a Kafka Connect sink: its last commit landed).")
    if not _confirmed(args, table_name):
        return 1
    result = catalog_call(cfg, partial(operator_moves.skip_to, committer, moves, reason=args.reason, by=_operator()))
    print(f"reset: commit {result.commit_id}, snapshot {result.snapshot_id}; {len(moves)} partition(s) of {table_name} "
          f"moved to the offsets of {args.from_group}")
    return 0
