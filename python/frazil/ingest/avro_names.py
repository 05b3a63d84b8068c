"""Writer schemas rewritten for reading (pure): each named type defined once per use
(:func:`unshared`), field aliases left out (:func:`without_aliases`), the names as the writer
spells them (:func:`spellings`), Kafka Connect's semantic types given the Avro logical type of
the same encoding (:func:`annotated`), and the expanded form the resolver walks
(:func:`expanded`). Names follow the Avro spec's namespace rules; none of this changes how a
datum is encoded."""

from __future__ import annotations

from itertools import count
from typing import Any

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")

# Kafka Connect semantic types (``connect.name``) whose values are, bit for bit, an Avro logical
# type: Debezium's temporal types as its Avro converter writes them (PostgreSQL's ``date``,
# ``time`` and ``timestamp``: local values, no zone). Only these, on the base type named: a
# ``ZonedTimestamp`` is ISO text and stays a string, a ``NanoTimestamp`` stays a long (Iceberg v2
# has no nanosecond type), anything else keeps its base type.
CONNECT_LOGICAL = {
    ("int", "io.debezium.time.Date"): "date",
    ("int", "io.debezium.time.Time"): "time-millis",
    ("long", "io.debezium.time.MicroTime"): "time-micros",
    ("long", "io.debezium.time.Timestamp"): "local-timestamp-millis",
    ("long", "io.debezium.time.MicroTimestamp"): "local-timestamp-micros",
}


def expanded(writer: Any, *, annotate: bool = True) -> tuple[Any, Any]:
    """(``writer`` :func:`annotated` (unless ``annotate`` is off) and :func:`unshared`, that in
    fastavro's expanded form: every named type inline, named by its full name). ValueError when it
    is not valid Avro."""
    import fastavro  # a tenth of a second of every start; JSON pipelines never need it

    writer = unshared(annotated(writer) if annotate else writer)
    try:
        return writer, fastavro.parse_schema(writer, expand=True, _write_hint=False)
    except Exception as exc:  # noqa: BLE001 - fastavro's parse errors have no common base
        raise ValueError(f"the writer schema is not valid Avro: {exc}") from None


def unshared(schema: Any) -> Any:
    """``schema`` with each named type defined once per place it is used: where the writer refers
    to a type defined before it (Debezium's ``after`` to the row record ``before`` defined), a copy
    of the definition under a name of its own (``Value_2``). Names do not change the encoding;
    each place can then be read into a column of its own shape (the decoder resolves a reference
    to a writer type as the reader type alone, with no projection: a reader record with other
    fields, in another order, would be read wrongly there). A type referred to inside itself is
    left a reference (refused later: a recursive type cannot become columns)."""
    definitions: dict[str, tuple[dict[str, Any], str]] = {}   # full name: (definition, its enclosing namespace)
    taken: set[str] = set()

    def full(name: str, namespace: str) -> str:
        return name if "." in name or not namespace else f"{namespace}.{name}"

    def named(t: dict[str, Any], enclosing: str, inside: frozenset[str]) -> dict[str, Any]:
        name = str(t["name"])
        space = name.rpartition(".")[0] if "." in name else str(t.get("namespace", enclosing) or "")
        short = name.rpartition(".")[2]
        original = key = full(short, space)
        definitions.setdefault(key, (t, enclosing))
        out = dict(t)
        if key in taken:   # a second definition under the same name: a name of its own
            out["name"] = next(n for i in count(2) if full(n := f"{short}_{i}", space) not in taken)
            out["namespace"] = space
            key = full(out["name"], space)
        taken.add(key)
        if isinstance(t.get("fields"), list):   # inside it, a reference to itself (by its first name) stays one
            out["fields"] = [{**f, "type": walk(f.get("type"), space, inside | {original, key})}
                             if isinstance(f, dict) else f for f in t["fields"]]
        return out

    def walk(t: Any, namespace: str, inside: frozenset[str]) -> Any:
        if isinstance(t, list):
            return [walk(branch, namespace, inside) for branch in t]
        if isinstance(t, str):
            if t in PRIMITIVES:
                return t
            key = next((k for k in (full(t, namespace), t) if k in definitions), None)
            if key is None or key in inside:
                return t   # unknown (fastavro says so) or recursive (refused as such)
            definition, enclosing = definitions[key]
            return named(definition, enclosing, inside)
        if not isinstance(t, dict):
            return t
        kind = t.get("type")
        if kind in ("record", "error", "enum", "fixed") and isinstance(t.get("name"), str):
            return named(t, namespace, inside)
        if kind == "array":
            return {**t, "items": walk(t.get("items"), namespace, inside)}
        if kind == "map":
            return {**t, "values": walk(t.get("values"), namespace, inside)}
        if isinstance(kind, (dict, list)):
            return {**t, "type": walk(kind, namespace, inside)}
        return t

    return walk(schema, "", frozenset())


def annotated(schema: Any) -> Any:
    """``schema`` with each Kafka Connect semantic type of :data:`CONNECT_LOGICAL` that has no
    logical type given the one its encoding is (Debezium's ``MicroTimestamp``, a long of
    microseconds, becomes ``local-timestamp-micros``): its values land in temporal columns, as
    the source's own types, not as the integers that carry them."""
    if isinstance(schema, list):
        return [annotated(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if isinstance(kind, str) and "logicalType" not in schema:
        logical = CONNECT_LOGICAL.get((kind, str(schema.get("connect.name", ""))))
        if logical is not None:
            return {**schema, "logicalType": logical}
    out = {k: annotated(v) if k in ("type", "items", "values") else v for k, v in schema.items()}
    if isinstance(schema.get("fields"), list):
        out["fields"] = [{**f, "type": annotated(f.get("type"))} if isinstance(f, dict) else f
                         for f in schema["fields"]]
    return out


def spellings(schema: Any, namespace: str = "",
               out: dict[str, dict[str, str]] | None = None) -> dict[str, dict[str, str]]:
    """Every named type of ``schema`` by full name (the spec's namespace rules): its ``name`` and
    ``namespace`` attributes as written."""
    out = {} if out is None else out
    if isinstance(schema, list):
        for branch in schema:
            spellings(branch, namespace, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and isinstance(schema.get("name"), str):
            name = schema["name"]
            ns = name.rsplit(".", 1)[0] if "." in name else str(schema.get("namespace", namespace) or "")
            out.setdefault(f"{ns}.{name.rsplit('.', 1)[-1]}" if ns else name, {
                k: str(schema[k]) for k in ("name", "namespace") if k in schema})
            for f in schema.get("fields", ()) if kind in ("record", "error") else ():
                if isinstance(f, dict):
                    spellings(f.get("type"), ns, out)
        elif kind == "array":
            spellings(schema.get("items"), namespace, out)
        elif kind == "map":
            spellings(schema.get("values"), namespace, out)
        elif isinstance(kind, (dict, list)):
            spellings(kind, namespace, out)
    return out


def without_aliases(schema: Any) -> Any:
    """``schema`` with no ``aliases`` on its fields (they do not change the encoding)."""
    if isinstance(schema, list):
        return [without_aliases(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: without_aliases(v) if k in ("type", "items", "values") else v for k, v in schema.items()}
    if isinstance(schema.get("fields"), list):
        out["fields"] = [{k: without_aliases(v) if k == "type" else v for k, v in f.items() if k != "aliases"}
                         if isinstance(f, dict) else f for f in schema["fields"]]
    return out
