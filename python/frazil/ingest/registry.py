"""Writer schemas of values, by schema id (blocking I/O): from the schema file (``values.format
= "avro"``, one schema, id 0) or a schema registry's Confluent-compatible REST API (``"avro-confluent"``,
and ``"json-schema-confluent"`` whose schemas are JSON Schema documents: ``GET /schemas/ids/{id}``),
cached for the life of the process (a registered id never changes).

Requests go through ``requests`` (basic auth, TLS with an optional CA bundle, timeouts); a
connection error, timeout or 5xx answer is retried with backoff, at most ``max_attempts`` times,
then :class:`SchemaRegistryError`. A 404 saying the schema id is not found (``error_code`` 40403)
is an answer, not an outage (any other 404 is a wrong URL, and an error): the records
that name it are bad records (:meth:`WriterSchemas.get` returns :class:`Unusable`), as are records
of a schema of another kind than the format's (a Protobuf schema for ``"avro-confluent"``) or that
uses references.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from frazil.config import ValuesConfig
from frazil.errors import SchemaRegistryError
from frazil.flow import retry

if TYPE_CHECKING:   # imported where a registry is used: a JSON pipeline's start-up does not pay for it
    import requests
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType

    from frazil.iceberg.evolution import Change

log = logging.getLogger(__name__)

PLAIN_ID = 0          # the id the schema file's schema goes under (the native buffer's PLAIN_ID)
SCHEMA_NOT_FOUND = 40403   # the registry API's error_code for an unknown schema id (Confluent, Apicurio)
BACKOFF = retry.Backoff(0.5, 8.0)   # between attempts of one request


@dataclass(frozen=True)
class Unusable:
    """A schema id whose records cannot be read, and why (it becomes their bad-record reason)."""

    reason: str


class NativeSchemas(Protocol):
    """Schemas compiled natively by id (``_native.ProtoSchemas``, ``_native.KeySchemas``)."""

    def known(self, id: int) -> bool: ...
    def refuse(self, id: int, reason: str) -> None: ...


def learn(ids: Sequence[int], schemas: WriterSchemas, native: NativeSchemas, register: Callable[[int, str], None],
          lock: threading.Lock, what: str) -> None:
    """Blocking. Each of ``ids`` that ``native`` lacks, fetched from ``schemas`` and registered by
    ``register`` (id, text); refused with why when the registry cannot give it or it cannot be
    read (a NativeError: logged). ``what`` names such a schema in the log. Raises
    SchemaRegistryError when the registry cannot be asked."""
    from frazil import _native

    for schema_id in ids:
        with lock:
            if native.known(schema_id):
                continue
            found = schemas.get(schema_id)
            if isinstance(found, Unusable):
                native.refuse(schema_id, found.reason)
                continue
            try:
                register(schema_id, found)
            except _native.NativeError as exc:
                log.warning("%s id %d cannot be read; its records are bad records: %s", what, schema_id, exc)
                native.refuse(schema_id, str(exc))
            else:
                log.info("%s id %d registered", what, schema_id)


class RowSchemas(Protocol):
    """The registry's schemas of values decoded as JSON rows (JSON Schema, Protobuf), by the id
    each value names: a new table from the schema of a value, and the changes a later one asks
    (``unknown_fields = "evolve"``). Both block; ValueError says why a value's schema cannot be had
    or cannot become columns."""

    kind: str   # how logs name such a schema: "JSON Schema", "Protobuf schema"
    made: str   # how a table made from one is logged

    def schema(self, value: bytes, *, extra: Sequence[tuple[str, IcebergType, bool]] = ()
               ) -> tuple[int, Schema]: ...
    def evolution_of(self, table: Schema, value: bytes) -> list[Change]: ...


class WriterSchemas:
    def __init__(self, cfg: ValuesConfig, *, any_kind: bool = False) -> None:
        """The schemas of values in ``cfg.format`` (``ValuesConfig.of``: one format); with
        ``any_kind``, the registry's schemas of every kind (keys: :meth:`kind_of` says which)."""
        self._cfg = cfg
        # the registry's schemaType of the format; None: any
        self._kind: str | None = None if any_kind else {
            "json-schema-confluent": "JSON", "protobuf-confluent": "PROTOBUF"}.get(cfg.format, "AVRO")
        self._kinds: dict[int, str] = {}
        self._cache: dict[int, str | Unusable] = {}
        self._parsed: dict[int, Any] = {}   # keys' writer schemas, parsed by fastavro
        self._lock = threading.Lock()
        self._session: requests.Session | None = None
        if cfg.format == "avro":   # one schema, from the file (a .proto file or descriptor set: protobuf.py's)
            self._cache[PLAIN_ID] = Path(cfg.schema_file).read_text()
        elif cfg.registry is not None:
            import requests

            self._session = requests.Session()
            if cfg.registry.username:
                self._session.auth = (cfg.registry.username, cfg.registry.password)
            # per request, not on the session: requests lets REQUESTS_CA_BUNDLE override a session's verify
            self._verify: str | bool = cfg.registry.ca_file or True
            self._session.headers["Accept"] = "application/vnd.schemaregistry.v1+json, application/json"

    @property
    def where(self) -> str:
        registry = self._cfg.registry
        return registry.url if registry is not None else self._cfg.schema_file

    def get(self, schema_id: int) -> str | Unusable:
        """Blocking. The writer schema (Avro's JSON, or a JSON Schema document) of ``schema_id``,
        or why its records cannot be read (the registry has no such id, ...). Raises
        SchemaRegistryError when the registry cannot be asked."""
        with self._lock:
            if schema_id in self._cache:
                return self._cache[schema_id]
        if self._session is None:
            return Unusable(f"no writer schema has id {schema_id}")
        found = self._fetch(schema_id)
        with self._lock:
            self._cache[schema_id] = found
        return found

    def kind_of(self, schema_id: int) -> str:
        """The registry's schemaType of ``schema_id`` ("AVRO", "PROTOBUF", "JSON"), once
        :meth:`get` has it."""
        return self._kinds[schema_id]

    def key_object(self, key: bytes) -> bytes | None:
        """Blocking. A Kafka key in the Confluent wire format (Avro) as JSON: an object for a record
        key, the value for a primitive one; None when the key is not in that format. ValueError
        naming why it cannot be read. Raises SchemaRegistryError as :meth:`get`."""
        if self._cfg.format != "avro-confluent" or len(key) < 5 or key[0] != 0:
            return None
        schema_id = int.from_bytes(key[1:5], "big")
        writer = self.get(schema_id)
        if isinstance(writer, Unusable):
            raise ValueError(writer.reason)
        import fastavro  # a tenth of a second; JSON pipelines never need it

        with self._lock:
            parsed = self._parsed.get(schema_id)
        if parsed is None:
            try:
                parsed = fastavro.parse_schema(json.loads(writer))
            except Exception as exc:  # noqa: BLE001 - fastavro's parse errors have no common base
                raise ValueError(f"writer schema {schema_id} is not valid Avro: {exc}") from None
            with self._lock:
                self._parsed[schema_id] = parsed
        data = io.BytesIO(key[5:])
        try:
            datum = fastavro.schemaless_reader(data, parsed, None)
        except Exception as exc:  # noqa: BLE001 - a truncated or malformed datum
            raise ValueError(f"not a valid Avro datum of writer schema id {schema_id}: {exc}") from None
        if data.tell() != len(key) - 5:
            raise ValueError(f"not a valid Avro datum of writer schema id {schema_id}: "
                             f"{len(key) - 5 - data.tell()} byte(s) left over")
        try:
            return json.dumps(datum, default=_as_json).encode()
        except TypeError as exc:
            raise ValueError(str(exc)) from None

    def _fetch(self, schema_id: int) -> str | Unusable:
        import requests

        registry = self._cfg.registry
        assert registry is not None and self._session is not None
        url = f"{registry.url}/schemas/ids/{schema_id}"
        last = ""
        for attempt in retry.attempts(registry.max_attempts, BACKOFF):
            try:
                answer = self._session.get(url, timeout=registry.timeout_s, verify=self._verify)
            except requests.RequestException as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if answer.status_code == 404 and _error_code(answer) == SCHEMA_NOT_FOUND:
                    log.warning("schema registry %s has no schema id %d (%s)", registry.url, schema_id,
                                answer.text[:200])
                    return Unusable(f"unknown schema id {schema_id}: the schema registry at {registry.url} has no "
                                    "such schema (HTTP 404); was the record written against another registry?")
                if answer.status_code in (401, 403):
                    raise SchemaRegistryError(f"the schema registry at {registry.url} refused frazil (HTTP "
                                              f"{answer.status_code}) asking for schema id {schema_id}: check "
                                              "schema_registry.username and password")
                if answer.status_code < 500 and answer.ok:
                    return self._kept(schema_id, _schema_of(answer, registry.url, schema_id))
                if answer.status_code < 500:   # a 404 without the registry's "schema not found": a wrong url
                    raise SchemaRegistryError(f"the schema registry at {registry.url} answered HTTP "
                                              f"{answer.status_code} for schema id {schema_id}: {answer.text[:300]}")
                last = f"HTTP {answer.status_code}: {answer.text[:200]}"
            if attempt < registry.max_attempts:
                log.warning("schema registry %s: schema id %d, attempt %d/%d failed (%s); retrying in %.1fs",
                            registry.url, schema_id, attempt, registry.max_attempts, last, BACKOFF.delay(attempt))
        raise SchemaRegistryError(f"the schema registry at {registry.url} could not be asked for schema id {schema_id} "
                                  f"({registry.max_attempts} attempts; last: {last}); the records that need it wait "
                                  "in Kafka: restart once it answers")


    def _kept(self, schema_id: int, found: tuple[str, str] | Unusable) -> str | Unusable:
        """The schema text of a registry answer, if it is of the format's kind."""
        if isinstance(found, Unusable):
            return found
        kind, text = found
        if self._kind is not None and kind != self._kind:
            return Unusable(f"schema id {schema_id} is a {kind} schema, and values.format = \"{self._cfg.format}\" "
                            f"reads {self._kind} schemas: was the record written by another serializer?")
        with self._lock:
            self._kinds[schema_id] = kind
        return text


def _schema_of(answer: requests.Response, url: str, schema_id: int) -> tuple[str, str] | Unusable:
    """(schemaType, schema) of a registry's answer for ``schema_id``."""
    try:
        body = answer.json()
        schema = body["schema"]
    except (ValueError, KeyError, TypeError):
        raise SchemaRegistryError(f"the schema registry at {url} answered schema id {schema_id} with "
                                  f"{answer.text[:200]!r}, not {{\"schema\": ...}}") from None
    if body.get("references"):
        names = ", ".join(str(r.get("name")) for r in body["references"])
        return Unusable(f"schema id {schema_id} uses schema references ({names}), which frazil does not resolve yet; "
                        "register the schema with its types inlined")
    return str(body.get("schemaType", "AVRO")), str(schema)   # the registry API leaves the type out for Avro


def _error_code(answer: requests.Response) -> int | None:
    try:
        body = answer.json()
    except ValueError:
        return None
    code = body.get("error_code") if isinstance(body, dict) else None
    return code if isinstance(code, int) else None


def _as_json(value: object) -> object:
    """A key datum's value JSON has no type for, as the JSON decoder reads it: times as ISO-8601
    text, bytes base64-encoded, a decimal as its exact text."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    raise TypeError(f"a key value of type {type(value).__name__} cannot be read")
