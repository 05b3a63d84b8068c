"""Commands about a config file: ``config check`` (what it says, secrets masked; with ``--connect``
the brokers and the catalog reached as ``run`` would) and ``import-kc`` (a Kafka Connect sink's
config turned into frazil's)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from frazil.cli.oneshot import catalog_call, load_catalog, quiet_kafka_client
from frazil.errors import ConfigError, ConnectorConfigError, NotFound

if TYPE_CHECKING:
    from frazil import config as config_mod


_WRITER = "from the first record's writer schema"
_MADE_FROM = {"avro": _WRITER, "avro-confluent": _WRITER,
              "json-schema-confluent": "from the first record's JSON Schema (the registry's)",
              "protobuf-confluent": "from the first record's Protobuf message (the registry's schema)",
              "protobuf": "from the .proto file's message (values.message)"}


def _made(cfg: config_mod.Config, table: config_mod.TableConfig | config_mod.DynamicConfig) -> str:
    """Where a table without declared columns takes them from, by the format(s) of its values."""
    def made(fmt: str) -> str:
        if fmt in _MADE_FROM:
            return _MADE_FROM[fmt]
        if table.changes is not None or table.connect_envelope:
            return "from the first record's Kafka Connect schema envelope"
        return "inferred from the first records"

    formats = cfg.formats_of(table)
    if len(formats) == 1:
        return made(formats[0])
    return "; ".join(f"{fmt} topics: {made(fmt)}" for fmt in formats)


def _format(cfg: config_mod.Config, table: config_mod.TableConfig | config_mod.DynamicConfig) -> str:
    """The format(s) of a table's values, for ``config check``."""
    return f" values={'|'.join(cfg.formats_of(table))}" if cfg.values.topics else ""


def _keyed(table: config_mod.TableConfig | config_mod.DynamicConfig) -> str:
    """How a keyed table takes its records, for ``config check``."""
    c = table.changes
    if c is None:
        return ""
    what = "debezium" if c.op == ("op",) and c.after == ("after",) else f"field {'.'.join(c.op)}" if c.op else "the row"
    if not c.target:
        merging = "position deletes every commit"
    else:   # spark/merge.py: due every merge_interval_s, or once merge_min_changes wait (0: the interval alone)
        merging = (f"merged by Spark into {c.target} every {c.merge_interval_s:g}s when changes wait"
                   + (f", or sooner once {c.merge_min_changes} changes wait" if c.merge_min_changes else ""))
    return (f"\n             mode={c.mode} ({what}) key={','.join(table.identifier_columns)} "
            f"tombstones={c.tombstones}; " + merging)


def check(args: argparse.Namespace) -> int:
    from frazil import config as config_mod
    from frazil.kafka import clients as kafka_clients

    cfg = config_mod.load(args.config)
    kafka_clients.options(cfg.kafka)   # the TLS files load (a CA that is not PEM is a config error)
    print(f"{args.config}: ok")
    print(f"  pipeline   {cfg.pipeline} (commit every {cfg.commit_interval_s:g}s, "
          f"at most {cfg.max_buffer_records} buffered records)")
    topics = (f"topic_pattern={cfg.kafka.topic_pattern}" if cfg.kafka.topic_pattern
              else f"topics={','.join(cfg.kafka.topics)}")
    from frazil.iceberg.catalog_errors import describe

    print(f"  kafka      {cfg.kafka.bootstrap_servers} {topics} group={cfg.kafka.group_id} "
          f"security={cfg.kafka.security.describe()}")
    print(f"  catalog    {cfg.catalog.name} {describe(cfg.catalog)}")
    for table in cfg.tables:
        takes = " ".join(filter(None, (f"topics~{table.topics}" if table.topics else "",
                                       f"{'.'.join(table.route_field)}~{table.route}" if table.route_field else "")))
        units = ",".join(f"{c.name}:{c.unit}" for c in table.columns if c.unit)
        rounded = ",".join(c.name for c in table.columns if c.rounding)
        made = _made(cfg, table)
        print(f"  table      {table.name} columns={len(table.columns) or made} "
              f"metadata_columns={table.metadata_columns} partition_by={list(table.partition_by)} "
              f"takes={takes or 'every record'} unknown_fields={table.unknown_fields}"
              + (f" units={units}" if units else "") + (f" rounding(half_even)={rounded}" if rounded else "")
              + (" case_insensitive" if table.case_insensitive else "") + _format(cfg, table)
              + (f" transforms={','.join(f'{t.op}:{t.field}' for t in table.transforms)}" if table.transforms else "")
              + _keyed(table))
    print(f"  bad records {cfg.on_bad_record}" + (f" -> {cfg.dead_letter_topic}" if cfg.on_bad_record == "dead_letter"
                                                 else " (stop, naming the record)"))
    if cfg.dynamic is not None:
        d = cfg.dynamic
        print(f"  dynamic    {d.table}{' for topics ~' + d.topics if d.topics else ''}: "
              + ("created on first use" if d.create else "existing tables only") + ", "
              + (f"{len(d.columns)} columns" if d.columns else f"columns {_made(cfg, d)}")
              + f", partition_by={list(d.partition_by)}, unknown_fields={d.unknown_fields}" + _format(cfg, d)
              + _keyed(d))
    print(f"  txlog      {cfg.txlog_dir} (fsync {cfg.txlog_fsync})")
    print(f"  memory     budget {cfg.memory_budget_bytes // (1024 * 1024)} MiB; stop after {cfg.outage_timeout_s:g}s "
          "of failing commits")
    m = cfg.maintenance
    print(f"  spark      {cfg.spark.master}; "
          + (f"flushes of {cfg.spark.bulk_min_rows}+ rows written by Spark" if cfg.spark.bulk_min_rows
             else "bulk writes off"))
    print("  maintenance " + (f"every {m.interval_s:g}s, expiry above {m.max_snapshots} snapshots, files to "
                             f"{m.target_file_size_mb} MB{', sorted by ' + m.sort_order if m.sort_order else ''}, "
                             f"orphans older than {m.orphan_min_age_s:g}s" if m.enabled else "off"))
    if args.connect:
        _connect_check(cfg)
    return 0


def _connect_check(cfg: config_mod.Config) -> None:
    """Reach the brokers and the catalog as ``run`` would; a failure raises with its exit status."""
    from frazil.status import partitions, source_topics

    quiet_kafka_client()
    topics = asyncio.run(source_topics(cfg.kafka))
    found = asyncio.run(partitions(cfg.kafka, topics)) if topics else []
    print(f"  reached    kafka: {len(topics)} source topic(s), {len(found)} partition(s)"
          + ("" if topics or not cfg.kafka.topic_pattern else " (none matches the pattern yet)"))
    catalog = load_catalog(cfg)
    for table in cfg.tables:
        exists = catalog_call(cfg, partial(catalog.table_exists, table.name))
        print(f"  reached    catalog: {table.name} " + ("exists" if exists else
                                                       "does not exist yet (created on start)" if table.create else
                                                       "DOES NOT EXIST and [table] create = false"))
        if not exists and not table.create:
            raise NotFound(f"table {table.name} does not exist and create = false; create it or set create = true")
        if exists:
            from frazil.iceberg import layout

            change = layout.plan(catalog_call(cfg, partial(catalog.load_table, table.name)), table)
            if change:
                print(f"  layout     {table.name}: changed at start to the config's: {change.describe()}")


def import_kc(args: argparse.Namespace) -> int:
    from frazil import kafka_connect

    try:
        name, connector = kafka_connect.read(args.connector.read_text(), args.connector.name)
        done = kafka_connect.convert(name, connector, pipeline=args.pipeline, bootstrap_servers=args.bootstrap_servers,
                                     dynamic_namespace=args.dynamic_namespace)
    except FileNotFoundError:
        raise ConfigError(f"{args.connector} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:   # a folder, no permission, not text
        raise ConfigError(f"{args.connector} cannot be read: {exc}") from None
    except ConnectorConfigError as exc:
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
