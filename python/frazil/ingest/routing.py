"""Routing: which tables take which records (pure decisions; the route keys come from the native
core).

Static: a table takes a record when the record's topic fully matches the table's ``topics`` regex
(when it has one) and the value at its ``route_field`` fully matches its ``route`` regex (when it
has one). Dynamic (``[dynamic]``): a record of a matching topic also goes to the table its
template names. A record goes to every table that takes it (fan-out), and to none when none does:
it is still accounted as read (counted as unrouted), never silently lost. A record whose
template field is missing (or null, an object, an array) names no table: it is a bad record, and
so is a value that is not one JSON object where a route field must be read (it would otherwise
pass for a record without the field).
Decisions are made once per topic and once per distinct route key, not once per record.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from frazil import _native
from frazil.buffers.positions import Takers
from frazil.config import DynamicConfig, TableConfig, normalise
from frazil.errors import ConfigError

Key = str | None


@dataclass(frozen=True)
class _Rule:
    table: str
    topics: re.Pattern[str] | None
    field: tuple[str, ...]
    route: re.Pattern[str] | None


@dataclass(frozen=True)
class TopicRoute:
    """The tables a topic's records may go to, and the route fields that decide it."""

    topic: str
    always: tuple[str, ...]                # tables that take every record of the topic
    paths: tuple[tuple[str, ...], ...]     # route fields to read from each value (distinct)
    rules: tuple[_Rule, ...]               # tables that decide by a route field
    dynamic: DynamicConfig | None = None   # the template naming a table for each record

    @property
    def by_value(self) -> bool:
        return bool(self.paths)

    def tables_for(self, keys: Sequence[Key]) -> tuple[tuple[str, ...], str | None]:
        """The tables that take a record whose route fields (in ``paths`` order) hold ``keys``,
        and the template field that names no table (a bad record), if any."""
        taken = list(self.always)
        for rule in self.rules:
            key = keys[self.paths.index(rule.field)]
            if key is not None and rule.route is not None and rule.route.fullmatch(key):
                taken.append(rule.table)
        if self.dynamic is not None:
            values, missing = self.dynamic.topic_values(self.topic)
            if missing:
                return tuple(taken), missing[0]   # the topic has no such part
            for placeholder in self.dynamic.placeholders:
                if placeholder in values:
                    continue
                key = keys[self.paths.index(tuple(placeholder.split(".")))]
                if key is None or not normalise(key):
                    return tuple(taken), placeholder
                values[placeholder] = key
            name = self.dynamic.name(values)
            if name not in taken:
                taken.append(name)
        return tuple(taken), None


class Router:
    def __init__(self, tables: Sequence[TableConfig], dynamic: DynamicConfig | None = None) -> None:
        self._rules = tuple(_Rule(t.name, re.compile(t.topics) if t.topics else None, t.route_field,
                                  re.compile(t.route) if t.route_field else None) for t in tables)
        self._dynamic = dynamic
        self._static = frozenset(t.name for t in tables)
        self._dynamic_topics = re.compile(dynamic.topics) if dynamic is not None and dynamic.topics else None
        self._topics: dict[str, TopicRoute] = {}
        self._decided: dict[tuple[str, tuple[Key, ...]], tuple[tuple[str, ...], str | None]] = {}

    def takers(self, topic: str) -> Takers:
        """The tables that may take records of ``topic``: static routing decided by the topic, and
        whether tables named by the records' values (``[dynamic]`` by a field) may too."""
        route = self.for_topic(topic)
        return Takers(tuple(dict.fromkeys([*route.always, *(r.table for r in route.rules)])), route.dynamic is not None,
                      route.always)

    def takes(self, topic: str, table: str) -> bool:
        """Whether table ``table`` may take records of ``topic`` (a record without a value, such as
        a tombstone, goes to these: there is no value to route by)."""
        takers = self.takers(topic)
        if table in takers.tables:
            return True
        return (takers.by_values and self._dynamic is not None and table not in self._static
                and self._dynamic.matches(table))

    def for_topic(self, topic: str) -> TopicRoute:
        route = self._topics.get(topic)
        if route is None:
            route = self._topics[topic] = self._route(topic)
        return route

    def _route(self, topic: str) -> TopicRoute:
        rules = [r for r in self._rules if r.topics is None or r.topics.fullmatch(topic)]
        dynamic = self._dynamic if self._dynamic is not None and (
            self._dynamic_topics is None or self._dynamic_topics.fullmatch(topic)) else None
        paths = tuple(dict.fromkeys([*(r.field for r in rules if r.field), *(dynamic.fields if dynamic else ())]))
        always = tuple(r.table for r in rules if not r.field)
        if dynamic is not None and not dynamic.fields:   # named by the topic alone
            values, missing = dynamic.topic_values(topic)
            if missing:
                raise ConfigError(f"dynamic.table {dynamic.table!r} names no table for topic {topic!r}: it has no "
                                  f"{', '.join(missing)}; set dynamic.topics to the topics the template can name")
            always = tuple(dict.fromkeys([*always, dynamic.name(values)]))
            dynamic = None
        return TopicRoute(topic, always, paths, tuple(r for r in rules if r.field), dynamic)

    def groups(self, topic: str, values: list[bytes]) -> list[Group]:
        """``values`` of one topic in groups going to the same tables, in order of first
        appearance; ``indices`` None for "all of them". A group with no table and no ``bad`` is the
        unrouted records. A group with ``bad`` holds bad records for routing: a template field
        naming no table (they still go to ``tables``, the ones that take them anyway), or values
        that are not one JSON object (no table)."""
        route = self.for_topic(topic)
        if not route.by_value:
            return [Group(route.always, None)]
        found, malformed = _native.route_groups(values, [list(p) for p in route.paths])
        return self._grouped(route, [(keys, indices, None) for keys, indices in found], malformed)

    def groups_fetched(self, topic: str, fetched: _native.Fetched, start: int) -> list[Group]:
        """As :meth:`groups`, over the records of one partition fetch from index ``start`` on that
        have a value, read from the fetched bytes: ``indices`` are the fetch's, and each group
        carries its records' ``value_bytes``."""
        route = self.for_topic(topic)
        if not route.by_value:
            raise ValueError(f"topic {topic} is routed by the topic alone: its fetches need no grouping")
        found, malformed = _native.route_fetched(fetched, start, [list(p) for p in route.paths])
        return self._grouped(route, found, malformed)

    def _grouped(self, route: TopicRoute, found: Sequence[tuple[list[Key], list[int], int | None]],
                 malformed: list[tuple[int, str]]) -> list[Group]:
        topic = route.topic
        out: list[Group] = []
        for keys, indices, value_bytes in found:
            decided_key = (topic, tuple(keys))
            decided = self._decided.get(decided_key)
            if decided is None:
                decided = route.tables_for(keys)
                if len(self._decided) < 100_000:   # a high-cardinality route field is decided per group
                    self._decided[decided_key] = decided
            tables, missing = decided
            bad = None if missing is None else (missing, (
                f"it names no table: [dynamic] table = {self._dynamic.table!r} needs a text, number or boolean "
                "value there" if self._dynamic is not None else ""))
            out.append(Group(tables, indices, bad, value_bytes))
        by_reason: dict[str, list[int]] = {}
        for i, reason in malformed:
            by_reason.setdefault(reason, []).append(i)
        out += [Group((), indices, ("", f"{reason}; its route field(s) {', '.join('.'.join(p) for p in route.paths)} "
                                        "cannot be read")) for reason, indices in by_reason.items()]
        return out


@dataclass(frozen=True)
class Group:
    """Records of one batch going to the same tables (``indices`` None: all of them). ``bad``:
    (field, reason) when routing itself finds them bad."""

    tables: tuple[str, ...]
    indices: list[int] | None
    bad: tuple[str, str] | None = None
    value_bytes: int | None = None   # of a fetch's group (Router.groups_fetched)
