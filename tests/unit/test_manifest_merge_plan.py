"""The tiered manifest-merge plan (``iceberg/pyiceberg_patches/manifest_merge.plan``): each data file's entry is
rewritten once per tier, not once every few commits; a snapshot lists a bounded number of
manifests; full manifests and manifests without file counts are never rewritten."""

from __future__ import annotations

import math
import random

import pytest

from frazil.iceberg.pyiceberg_patches.manifest_merge import Manifest, plan, tier

ENTRY_BYTES = 700   # about what one data file's entry takes in a manifest
EIGHT_MB = 8 * 1024 * 1024


def commits(files_per_commit: list[int], fan_in: int, target: int = EIGHT_MB) -> tuple[list[list[int]], list[int]]:
    """Run ``plan`` as a table's commits would: each commit puts its new manifest first, before the
    manifests of the snapshot before it. Returns the manifests of the last snapshot (each a list
    of file numbers) and how often each file was rewritten."""
    manifests: list[list[int]] = []
    rewrites: list[int] = []
    for n in files_per_commit:
        new = list(range(len(rewrites), len(rewrites) + n))
        rewrites.extend([0] * n)
        listed = [new] + manifests
        groups = plan([Manifest(len(m), 200 + ENTRY_BYTES * len(m)) for m in listed], fan_in, target)
        assert sorted(i for g in groups for i in g) == list(range(len(listed))), "every manifest exactly once"
        manifests = []
        for g in groups:
            files = [f for i in g for f in listed[i]]
            if len(g) > 1:
                for f in files:
                    if f not in new:
                        rewrites[f] += 1
            manifests.append(files)
    return manifests, rewrites


def test_tiers_are_whole_powers_of_the_fan_in() -> None:
    assert [tier(n, 16) for n in (0, 1, 15, 16, 255, 256, 4095, 4096)] == [0, 0, 0, 1, 1, 2, 2, 3]


@pytest.mark.parametrize("fan_in", [2, 4, 16])
def test_each_file_is_rewritten_once_per_tier_and_the_list_stays_short(fan_in: int) -> None:
    n = 1000
    manifests, rewrites = commits([1] * n, fan_in)
    levels = math.ceil(math.log(n, fan_in))
    assert sorted(f for m in manifests for f in m) == list(range(n)), "no file lost or listed twice"
    assert max(rewrites) <= levels
    assert len(manifests) <= (fan_in - 1) * (levels + 1)
    # merging every small manifest into one whenever fan_in have gathered (pyiceberg's default
    # packing) rewrites n^2 / (2 fan_in) entries; this rewrites at most n log n
    assert sum(rewrites) <= n * levels


def test_commits_of_many_files_merge_at_their_own_tier() -> None:
    rng = random.Random(7)
    sizes = [rng.choice([1, 1, 2, 3, 20, 40]) for _ in range(600)]
    manifests, rewrites = commits(sizes, 16)
    assert sorted(f for m in manifests for f in m) == list(range(sum(sizes)))
    assert max(rewrites) <= math.ceil(math.log(sum(sizes), 16))


def test_a_merge_cascades_to_the_next_tier_in_one_commit() -> None:
    listed = [Manifest(1, 900)] + [Manifest(1, 900)] * 3 + [Manifest(4, 3000)] * 3
    assert plan(listed, 4, EIGHT_MB) == [list(range(7))]


def test_full_manifests_and_manifests_without_counts_are_never_rewritten() -> None:
    full = Manifest(5000, EIGHT_MB)
    unknown = Manifest(None, 900)
    listed = [Manifest(1, 900), full, unknown, Manifest(1, 900), full, Manifest(1, 900), Manifest(1, 900)]
    assert plan(listed, 4, EIGHT_MB) == [[0, 3, 5, 6], [1], [2], [4]]


def test_no_merge_makes_a_manifest_over_the_target() -> None:
    target = 200 + ENTRY_BYTES * 32
    manifests, rewrites = commits([1] * 300, 4, target=target)
    assert max(200 + ENTRY_BYTES * len(m) for m in manifests) <= target
    assert sorted(f for m in manifests for f in m) == list(range(300))
    assert max(rewrites) <= 3   # 1 -> 4 -> 16 -> 32 (full): never again


def test_manifests_near_the_target_are_not_merged_into_one_many_times_its_size() -> None:
    """Sixteen manifests just under 8 MB (Spark's rewrite_manifests leaves such) and a commit's
    new one: merged as they fit, never into one of 16 x 8 MB."""
    near = [Manifest(3000, EIGHT_MB - 100_000)] * 16
    small = [Manifest(1, 900)] * 16
    groups = plan([Manifest(1, 900)] + near + small, 16, EIGHT_MB)
    listed = [Manifest(1, 900)] + near + small
    assert sorted(i for g in groups for i in g) == list(range(33))
    for g in groups:
        assert len(g) == 1 or sum(listed[i].length for i in g) <= EIGHT_MB, g
    assert [g for g in groups if len(g) > 1] == [[0, *range(17, 33)]]   # the small ones, merged
    half = [Manifest(300, EIGHT_MB // 3)] * 16   # three fit: merged three at a time
    assert sorted(len(g) for g in plan(half, 16, EIGHT_MB)) == [1, 3, 3, 3, 3, 3]


def test_nothing_merges_below_the_fan_in() -> None:
    assert plan([Manifest(1, 900)] * 15, 16, EIGHT_MB) == [[i] for i in range(15)]
    assert plan([Manifest(1, 900)] * 3, 0, EIGHT_MB) == [[0, 1, 2]]   # a fan-in under 2 counts as 2
