"""When maintenance is due and what snapshot expiry keeps (pure, clock passed in)."""

import tomllib
from dataclasses import replace

import pytest

from frazil import config as config_mod
from frazil.config import MaintenanceConfig
from frazil.errors import ConfigError
from frazil.spark.schedule import FULL_RUN, PAUSE_AFTER_FAILURE_S, Job, Schedule, expire_before

CFG = MaintenanceConfig(interval_s=60, max_snapshots=10, snapshot_max_age_s=3600)


def test_the_full_run_comes_every_interval_counted_from_start_then_from_the_last_run() -> None:
    s = Schedule(CFG, started=1000.0)
    assert s.due(1059.9) == ()
    assert s.due(1060.0) == FULL_RUN
    s.ran(FULL_RUN, 1075.0, snapshots_after=3)
    assert s.due(1134.0) == ()
    assert s.due(1135.0) == FULL_RUN


def test_compaction_runs_before_expiry_and_orphan_removal_last() -> None:
    assert FULL_RUN.index(Job.COMPACT) < FULL_RUN.index(Job.EXPIRE) < FULL_RUN.index(Job.ORPHANS)


def test_too_many_snapshots_make_expiry_due_at_once_and_only_expiry() -> None:
    s = Schedule(CFG, started=1000.0)
    s.snapshots = 10
    assert s.due(1001.0) == ()
    s.snapshots = 11
    assert s.due(1001.0) == (Job.EXPIRE,)
    s.ran((Job.EXPIRE,), 1002.0, snapshots_after=5)
    assert s.due(1003.0) == ()
    assert s.last_full is None  # an expiry alone does not move the full run


def test_delete_files_piling_up_make_the_position_delete_rewrite_due_counted_from_what_it_left() -> None:
    s = Schedule(replace(CFG, max_delete_files=8), started=1000.0)
    s.delete_files = 8
    assert s.due(1001.0) == ()
    s.delete_files, s.snapshots = 9, 11
    assert s.due(1001.0) == (Job.POSITION_DELETES, Job.EXPIRE)
    # the rewrite left one delete file per partition: 30 partitions, still over 8, and not due again
    s.ran((Job.POSITION_DELETES, Job.EXPIRE), 1002.0, snapshots_after=5, delete_files_after=30)
    assert s.due(1003.0) == ()
    s.delete_files = 38
    assert s.due(1004.0) == ()
    s.delete_files = 39
    assert s.due(1004.0) == (Job.POSITION_DELETES,)


def test_a_failed_run_pauses_everything_so_a_broken_spark_is_not_restarted_every_poll() -> None:
    s = Schedule(CFG, started=1000.0)
    s.ran((Job.EXPIRE,), 1001.0, snapshots_after=50, failed=True)
    assert s.due(1001.0 + PAUSE_AFTER_FAILURE_S - 0.1) == ()
    assert s.due(1001.0 + PAUSE_AFTER_FAILURE_S) in ((Job.EXPIRE,), FULL_RUN)


def test_expiry_keeps_the_newest_half_when_over_the_count() -> None:
    now = 10_000_000
    snaps = [now - 1000 * i for i in range(25)]  # newest first, one a second
    cutoff = expire_before(snaps, now, CFG)
    assert cutoff is not None
    kept = [ts for ts in snaps if ts >= cutoff]
    assert len(kept) == 5 and max(snaps) in kept


def test_expiry_drops_snapshots_past_the_maximum_age_even_under_the_count() -> None:
    now = 10_000_000
    snaps = [now, now - 10_000, now - 3_700_000, now - 3_800_000]
    cutoff = expire_before(snaps, now, CFG)
    assert cutoff is not None and [ts for ts in snaps if ts >= cutoff] == snaps[:2]


def test_expiry_keeps_the_current_snapshot_however_old_and_says_when_there_is_nothing_to_do() -> None:
    now = 10_000_000
    assert expire_before([now - 9_000_000], now, CFG) is None
    assert expire_before([now, now - 1000], now, CFG) is None


BASE = """
[pipeline]
name = "p"
outage_timeout_s = 100
commit_interval_s = 10
[kafka]
bootstrap_servers = "x:1"
topics = ["t"]
[table]
name = "db.t"
columns = [{ name = "id", type = "long" }]
"""


def test_maintenance_and_spark_defaults() -> None:
    cfg = config_mod.parse(tomllib.loads(BASE))
    assert cfg.maintenance == MaintenanceConfig()
    assert cfg.maintenance.enabled and cfg.spark.master == "local[*]" and cfg.spark.bulk_min_rows == 0


@pytest.mark.parametrize("extra, message", [
    ("[maintenance]\norphan_min_age_s = 110", "orphan_min_age_s .* must be greater than pipeline.outage_timeout_s"),
    ("[maintenance]\nsort_order = \"nope\"", "sort_order names 'nope'"),
    ("[maintenance]\nsort_order = \"id; DROP\"", "sort_order .* must be columns"),
    ("[maintenance]\nmax_snapshots = 1", "max_snapshots must be at least 2"),
    ("[maintenance]\ncompact = true", "unknown key"),
    ("[spark]\nmaster = \"yarn\"", "spark.master 'yarn'"),
    ("[spark]\nbulk_min_rows = -1", "bulk_min_rows"),
])
def test_bad_maintenance_and_spark_settings_name_the_key(extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_mod.parse(tomllib.loads(BASE + extra))


def test_orphan_age_just_above_the_longest_wait_of_a_written_file_is_accepted() -> None:
    cfg = config_mod.parse(tomllib.loads(BASE + "[maintenance]\norphan_min_age_s = 121\nsort_order = \"id DESC\""))
    assert replace(cfg.maintenance, orphan_min_age_s=121.0) == cfg.maintenance
