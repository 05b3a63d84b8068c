"""Source-partition offsets stored with the data, and the contiguity rules (pure, no I/O).

The truth about progress lives in each table, written in the same catalog commit as the data: the
table property ``frazil.offsets.<pipeline>`` (kept by maintenance jobs) and the same value in the
snapshot summary (for audit, and to notice a rollback: see :func:`held`). The value maps each source
partition to the next offset not yet committed to the table: ``{"topic": {"0": 1234, "1": 99}}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

TopicPartition = tuple[str, int]

OFFSETS_PREFIX = "frazil.offsets."
COMMIT_ID_KEY = "frazil.commit-id"
PIPELINE_KEY = "frazil.pipeline"
VTTS_KEY = "frazil.vtts"   # valid-through timestamp (ms) of a full distributed commit
# an empty snapshot that closes a commit id in a table (why, as text): that commit id can never land
# there afterwards (``Committer.seal``)
SEALED_KEY = "frazil.sealed"


PROGRESS_PREFIX = "frazil.progress."
SKIP_PREFIX = "frazil.skip."   # records an operator told the pipeline to skip (``frazil offsets --skip``)
# the id of each topic the pipeline's offsets were read from, as the broker named it when they were
# (``kafka/topic_ids.py``): ``{"topic": "id"}``; a topic deleted and created again has a new one
TOPIC_IDS_PREFIX = "frazil.topic-ids."
# (snapshot summary) where the dead-letter topic stood just before a commit that carries bad records
# was made: its bad records went there after the commit landed, so at or past this
# (``coordination/dead_letters.py`` writes and reads the value; kept here as text)
LETTERS_PREFIX = "frazil.dead-letters-from."


def property_key(pipeline: str) -> str:
    return OFFSETS_PREFIX + pipeline


def progress_key(pipeline: str) -> str:
    """The pipeline's low watermark, kept with every table's offsets (same encoding): every record
    below it is in every table that takes it, or was taken by none (rule 2 with several tables)."""
    return PROGRESS_PREFIX + pipeline


def encode(offsets: Mapping[TopicPartition, int]) -> str:
    by_topic: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(by_topic, separators=(",", ":"), sort_keys=True)


def decode(text: str) -> dict[TopicPartition, int]:
    return {(topic, int(p)): int(o) for topic, parts in json.loads(text).items() for p, o in parts.items()}


def stored_offsets(properties: Mapping[str, str], pipeline: str) -> dict[TopicPartition, int]:
    text = properties.get(property_key(pipeline))
    return decode(text) if text else {}


# what an operator does about a recreated topic (``{pipeline}`` filled in)
# (editing the table properties does not do it: the newest snapshot summary wins over them, as after a rollback)
RECREATED_FIX = ("To read the new topic into the table: stop every process of the pipeline, check the table, then "
                 "give the pipeline a new pipeline.name (pipeline {pipeline}'s offsets stay with the table; the new "
                 "name reads every topic of the pipeline from kafka.auto_offset_reset).")


def letters_key(pipeline: str) -> str:
    return LETTERS_PREFIX + pipeline


def topic_ids_key(pipeline: str) -> str:
    return TOPIC_IDS_PREFIX + pipeline


def stored_topic_ids(properties: Mapping[str, str], pipeline: str) -> dict[str, str]:
    text = properties.get(topic_ids_key(pipeline))
    return {str(t): str(i) for t, i in json.loads(text).items()} if text else {}


def encode_topic_ids(ids: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(ids.items())), separators=(",", ":"))


def recreated(stored: Mapping[str, str], current: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """The topics whose id is not the one ``stored`` with a table's offsets: ``{topic: (stored,
    current)}``. A topic with no stored id (a table written before ids were kept, a topic new to
    the pipeline) or no current one (the broker has no ids, the topic is gone) is not judged here."""
    return {t: (stored[t], current[t]) for t in sorted(stored.keys() & current.keys())
            if stored[t] and current[t] and stored[t] != current[t]}


def recreated_refusal(stored: Mapping[str, str], read_from: Mapping[str, str], *, commit_id: str, table: str,
                      pipeline: str) -> str | None:
    """Why commit ``commit_id`` to ``table`` is refused: records ``read_from`` a topic of another id
    than the one ``stored`` with the table's offsets; None when none is."""
    changed = recreated(stored, read_from)
    if not changed:
        return None
    detail = "; ".join(f"topic {t}: the table's offsets were read from topic id {was}, these records from {now}"
                       for t, (was, now) in changed.items())
    return (f"commit {commit_id} to {table}: {detail} (table property {topic_ids_key(pipeline)}). The topic was "
            "deleted and created again; nothing was committed. " + RECREATED_FIX.format(pipeline=pipeline))


def skip_key(pipeline: str) -> str:
    return SKIP_PREFIX + pipeline


def stored_skips(properties: Mapping[str, str], pipeline: str) -> dict[TopicPartition, dict[int, dict[str, str]]]:
    """The records of each partition the table's pipeline must skip, each with who said so and why:
    ``{"topic": {"0": {"40": {"reason": ..., "by": ..., "at": ...}}}}`` in the property."""
    text = properties.get(skip_key(pipeline))
    if not text:
        return {}
    return {(topic, int(p)): {int(o): dict(why) for o, why in offs.items()}
            for topic, parts in json.loads(text).items() for p, offs in parts.items()}


def encode_skips(skips: Mapping[TopicPartition, Mapping[int, Mapping[str, str]]]) -> str:
    by_topic: dict[str, dict[str, dict[str, Mapping[str, str]]]] = {}
    for (topic, partition), offs in sorted(skips.items()):
        by_topic.setdefault(topic, {})[str(partition)] = {str(o): why for o, why in sorted(offs.items())}
    return json.dumps(by_topic, separators=(",", ":"), sort_keys=True)


def stored_progress(properties: Mapping[str, str], pipeline: str) -> dict[TopicPartition, int]:
    text = properties.get(progress_key(pipeline))
    return decode(text) if text else {}


@dataclass(frozen=True)
class Held:
    """What a table holds for a pipeline: its offsets and watermark, and why the table property
    was not believed (``rolled_back``), if it was not."""

    offsets: dict[TopicPartition, int]
    progress: dict[TopicPartition, int]
    rolled_back: str | None = None
    topic_ids: dict[str, str] = field(default_factory=dict)


def held(properties: Mapping[str, str], ancestry: Iterable[Mapping[str, str]], pipeline: str) -> Held:
    """The table's offsets for ``pipeline``. ``ancestry``: the snapshot summaries from the current
    snapshot back through its parents. frazil writes its offsets into the table property and into
    its snapshot's summary in one commit, so they agree, unless the table was rolled back (a
    rollback moves the current snapshot and leaves properties alone): then the newest summary of
    the pipeline in the current ancestry is what the data holds, and it wins. With no such summary
    left (expired), the property is all there is."""
    key = property_key(pipeline)
    stored = stored_offsets(properties, pipeline)
    for summary in ancestry:
        if key not in summary:
            continue   # a maintenance rewrite, another pipeline's commit
        truth = decode(summary[key])
        if truth == stored:
            break
        text = summary.get(progress_key(pipeline))
        changed = sorted(tp for tp in set(truth) | set(stored) if truth.get(tp) != stored.get(tp))
        ids = summary.get(topic_ids_key(pipeline))
        return Held(truth, decode(text) if text else {}, (
            f"the table property {key} says {encode({tp: stored[tp] for tp in changed if tp in stored})} but the "
            f"current snapshot's data holds {encode({tp: truth[tp] for tp in changed if tp in truth})}: the table "
            "was rolled back (or the property edited); resuming from what the data holds"),
            stored_topic_ids({topic_ids_key(pipeline): ids} if ids else {}, pipeline))
    return Held(stored, stored_progress(properties, pipeline), topic_ids=stored_topic_ids(properties, pipeline))


def merge_progress(*marks: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Watermarks only ever tell the truth late (a lower one is stale, never wrong): keep the highest."""
    out: dict[TopicPartition, int] = {}
    for mark in marks:
        for tp, offset in mark.items():
            out[tp] = max(out.get(tp, offset), offset)
    return out


@dataclass(frozen=True)
class Range:
    """Records of one source partition covered by one commit: offsets in ``[start, end)``."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end:
            raise ValueError(f"an offset range needs 0 <= start < end, got [{self.start}, {self.end})")


class Verdict(Enum):
    COMMIT = "commit"                # starts exactly at the stored offset (or nothing stored yet)
    ALREADY_COMMITTED = "already"    # end <= stored: drop the files, nothing to do
    OVERLAP = "overlap"              # start < stored < end: re-read from the stored offset
    GAP = "gap"                      # start > stored: records would be skipped; never commit


def classify(stored: int | None, rng: Range) -> Verdict:
    """Rule 3 of exactly-once.md for one partition."""
    if stored is None:
        return Verdict.COMMIT
    if rng.end <= stored:
        return Verdict.ALREADY_COMMITTED
    if rng.start == stored:
        return Verdict.COMMIT
    if rng.start < stored:
        return Verdict.OVERLAP
    return Verdict.GAP


@dataclass(frozen=True)
class CommitPlan:
    """What to do with one commit's ranges against the offsets a table holds now."""

    verdicts: dict[TopicPartition, Verdict] = field(default_factory=dict)

    def where(self, verdict: Verdict) -> list[TopicPartition]:
        return sorted(tp for tp, v in self.verdicts.items() if v is verdict)

    @property
    def all_committed(self) -> bool:
        return all(v is Verdict.ALREADY_COMMITTED for v in self.verdicts.values())

    @property
    def committable(self) -> bool:
        return bool(self.verdicts) and all(v is Verdict.COMMIT for v in self.verdicts.values())


def plan(stored: Mapping[TopicPartition, int], ranges: Mapping[TopicPartition, Range]) -> CommitPlan:
    return CommitPlan({tp: classify(stored.get(tp), rng) for tp, rng in ranges.items()})


def advance(stored: Mapping[TopicPartition, int], ranges: Mapping[TopicPartition, Range]) -> dict[TopicPartition, int]:
    """The offsets a table holds after committing ``ranges`` (rule 1: they move only with data)."""
    out = dict(stored)
    for tp, rng in ranges.items():
        out[tp] = rng.end
    return out
