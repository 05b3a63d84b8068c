"""The ``frazil`` command line: the argument parser, and every error as one line on stderr with its
exit status. The commands live in modules by role: ``inspection`` (status, offsets, txlog: they
change nothing), ``actions`` (run, backfill, maintain and compact, offsets --skip/--reset/--from-group)
and ``configuration`` (config check, import-kc)."""

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
# The imports below come after the settings above on purpose (E402 for this file): malloc before
# anything allocates (the heap keeps what it frees), the rest after malloc.tune.
# ruff: noqa: E402

from frazil import malloc

malloc.tune(os.environ)

import gc

from frazil.daemon import GC_THRESHOLDS

# The cycle collector at the daemon's thresholds from here on, not only once `frazil run` has
# started (daemon.tune_gc): importing what a run needs makes some 140,000 long-lived objects
# (modules, classes, pydantic schemas) and next to no garbage, and at CPython's default thresholds
# the collector went over them again and again, 0.1 s of CPU of the 0.8 s those imports took.
gc.set_threshold(*GC_THRESHOLDS)

import argparse
import logging
import sys
from pathlib import Path

from frazil.cli import actions, configuration, inspection
from frazil.errors import ConfigError, FrazilError, KafkaUnavailable

log = logging.getLogger("frazil")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("frazil")
    except PackageNotFoundError:   # run from a source tree that was never installed
        return "unknown (not installed)"


class _Version(argparse.Action):
    """``--version``: the installed release, looked up only when asked (importlib.metadata costs
    every other command 20 ms of its start)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"frazil {version()}")
        parser.exit()


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", type=Path, default=Path("frazil.toml"), help="TOML config (default: frazil.toml)")


def _table_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--table", default="", metavar="NAME",
                   help="this table only (default: every table of the pipeline that exists)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="frazil", description="Kafka into Apache Iceberg, exactly once.")
    parser.add_argument("--version", action=_Version, help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run the pipeline in the foreground until SIGTERM")
    _config_arg(p)
    p.set_defaults(func=actions.run)
    config_cmd = sub.add_parser("config", help="work with a config file: config check")
    for p in (config_cmd.add_subparsers(dest="config_command", required=True).add_parser(
                  "check", help="validate a config file and print what it says (secrets masked)"),
              sub.add_parser("check-config", help="the same as `config check`")):
        _config_arg(p)
        p.add_argument("--connect", action="store_true",
                       help="also reach the brokers and the catalog, and look for the source topics and tables")
        p.set_defaults(func=configuration.check)
    p = sub.add_parser("status", help="per table: last commit, snapshot, rows, offsets and lag; the group's members "
                                      "and which one coordinates; the local metrics endpoint")
    _config_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=inspection.status)
    p = sub.add_parser("offsets", help="per table, the offsets of the partitions it may take against the end "
                                       "offsets; per partition, the pipeline's watermark and where a restart resumes; "
                                       "--skip, --reset and --from-group move a table's offsets forward on purpose")
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
    p.add_argument("--table", default="",
                   help="with --skip/--reset: which table (needed when the pipeline has several)")
    p.add_argument("--reason", default="", help="with --skip/--reset: why (kept in the table)")
    p.add_argument("--yes", action="store_true", help="with --skip/--reset: confirm without a prompt")
    p.set_defaults(func=inspection.offsets)
    p = sub.add_parser("import-kc", help="turn an Apache Iceberg Kafka Connect sink config (.json or .properties) "
                                         "into a frazil config, listing every setting it cannot carry over")
    p.add_argument("connector", type=Path,
                   help="the connector's config: the JSON for Connect's REST API, or .properties")
    p.add_argument("--bootstrap-servers", default="",
                   help="the Kafka brokers (Connect takes them from its worker config; needed unless "
                        "iceberg.kafka.bootstrap.servers is set)")
    p.add_argument("--pipeline", default="", help="pipeline name (default: the connector's name)")
    p.add_argument("--dynamic-namespace", default="", help="dynamic routing: the namespace of the tables the route "
                                                          "field names (frazil's template fixes it)")
    p.add_argument("--output", "-o", type=Path, help="write the config here (default: stdout, the report to stderr)")
    p.set_defaults(func=configuration.import_kc)
    p = sub.add_parser("txlog", help="print a transaction log: checkpoint, state and last records (read-only)")
    p.add_argument("--dir", type=Path, required=True, help="the transaction log directory")
    p.add_argument("--tail", type=int, default=20, help="how many of the last records to print (default 20)")
    p.set_defaults(func=inspection.txlog)
    jobs = "rewrite_data_files, rewrite_position_delete_files, rewrite_manifests, expire_snapshots, remove_orphan_files"
    p = sub.add_parser("maintain", help=f"run table maintenance on Spark now, on every table of the pipeline: {jobs}")
    _config_arg(p)
    p.add_argument("--jobs", default="", help=f"comma-separated subset of: {jobs} (default: all, in that order)")
    p.add_argument("--force", action="store_true",
                   help="remove orphan files even if the transaction log holds unsettled commits")
    _table_arg(p)
    p.set_defaults(func=actions.maintain)
    p = sub.add_parser("compact", help="rewrite small data files into bigger ones (maintain --jobs rewrite_data_files)")
    _config_arg(p)
    _table_arg(p)
    p.set_defaults(func=actions.maintain, jobs="rewrite_data_files", force=False)
    p = sub.add_parser("backfill", help="land everything the topics hold now in every table of the pipeline, in big "
                                        "flushes written by Spark, then stop")
    _config_arg(p)
    p.add_argument("--batch-rows", type=int, default=2_000_000, help="rows per flush (default 2,000,000)")
    p.add_argument("--memory-mb", type=int, default=2048, help="memory budget for the buffer (default 2048)")
    p.set_defaults(func=actions.backfill)
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
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not _kafka_error(exc):
            raise
        # a client call after connecting (the brokers went away): one line, not a traceback
        error = KafkaUnavailable(f"Kafka: {type(exc).__name__}: {exc}")
        print(f"frazil: KafkaUnavailable: {error}", file=sys.stderr)
        return error.exit_code


def _kafka_error(exc: Exception) -> bool:
    """Whether ``exc`` is one of aiokafka's errors. aiokafka is not imported for it: a command that
    never loaded it (``--help``, ``txlog``) cannot have raised one."""
    errors = sys.modules.get("aiokafka.errors")
    return errors is not None and isinstance(exc, errors.KafkaError)

