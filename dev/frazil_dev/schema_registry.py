"""A real schema registry for tests and benchmarks: Apicurio Registry (Apache-2.0), whose
Confluent-compatible API (``/apis/ccompat/v7``) is what frazil's client speaks.

Confluent's registry and Karapace are not on the registries this project may use; Apicurio's
runnable build is on Maven Central (``io.apicurio:apicurio-registry-app:<v>:zip:all``). It is
downloaded once into the cache outside git (``$FRAZIL_CACHE`` or ``~/.cache/frazil``), checked
against Maven Central's SHA-1, unpacked, and run with an in-memory store on a free port of
127.0.0.1, with BACKWARD compatibility (the Confluent default) and canonical-hash lookups.

Library use::

    with SchemaRegistry.start(workdir) as registry:
        schema_id = registry.register("clicks-value", schema_json)
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
import zipfile
from pathlib import Path

import requests

from frazil.spark import maven
from frazil_dev.kafka_broker import free_port
from frazil_dev.server import ServerProcess

log = logging.getLogger(__name__)

APICURIO_VERSION = "3.0.9"
_URL = ("https://repo1.maven.org/maven2/io/apicurio/apicurio-registry-app/{v}/"
        "apicurio-registry-app-{v}-all.zip")
START_TIMEOUT_S = 120.0
CCOMPAT = "/apis/ccompat/v7"


class RegistryError(RuntimeError):
    """The schema registry could not be fetched or started."""


def ensure_app(version: str = APICURIO_VERSION) -> Path:
    """The unpacked registry (its runner jar), downloaded and checked first when not cached."""
    root = maven.cache_dir() / f"apicurio-{version}"
    runner = root / "app" / f"apicurio-registry-app-{version}-runner.jar"
    if (root / ".complete").exists() and runner.exists():
        return runner
    root.mkdir(parents=True, exist_ok=True)
    url = _URL.format(v=version)
    archive = root / "app.zip"
    print(f"fetching Apicurio Registry {version} from Maven Central into {root} ...", file=sys.stderr, flush=True)
    try:
        expected = requests.get(url + ".sha1", timeout=60).text.split()[0]
        digest = hashlib.sha1()   # the checksum Maven Central publishes
        with requests.get(url, stream=True, timeout=60) as answer, open(archive, "wb") as out:
            answer.raise_for_status()
            for chunk in answer.iter_content(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except requests.RequestException as exc:
        raise RegistryError(f"downloading {url} failed: {exc}") from exc
    if digest.hexdigest() != expected:
        raise RegistryError(f"{url}: SHA-1 {digest.hexdigest()} is not the published {expected}")
    shutil.rmtree(root / "app", ignore_errors=True)
    with zipfile.ZipFile(archive) as z:
        z.extractall(root / "app")
    archive.unlink()
    if not runner.exists():
        raise RegistryError(f"{url} has no {runner.name}")
    (root / ".complete").write_text(version)
    return runner


class SchemaRegistry(ServerProcess):
    """A running registry process; ``stop`` is idempotent."""

    LOG = "registry.log"
    WHAT = "the schema registry"
    Error = RegistryError

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL (frazil's ``schema_registry.url``)."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT}"

    @classmethod
    def start(cls, workdir: Path, *, heap: str = "256m") -> SchemaRegistry:
        runner = ensure_app()
        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        registry = cls.spawn(["java", f"-Xmx{heap}", "-XX:+UseSerialGC", f"-Dquarkus.http.port={port}",
                              "-Dquarkus.http.host=127.0.0.1", "-Dapicurio.ccompat.use-canonical-hash=true", "-jar",
                              str(runner)], workdir, port)
        try:
            registry.wait_http(f"{registry.url}/subjects", START_TIMEOUT_S, every_s=0.5)
            registry._put("/config", {"compatibility": "BACKWARD"})
        except BaseException:
            registry.stop()
            raise
        return registry

    def _put(self, path: str, body: dict[str, str]) -> object:
        answer = requests.put(self.url + path, json=body, timeout=10)
        answer.raise_for_status()
        return answer.json()

    def register(self, subject: str, schema: str | dict[str, object], kind: str = "AVRO") -> int:
        """Register a schema under ``subject`` (compatibility checked); its id. ``kind``: the
        registry's schemaType (``AVRO``, ``JSON`` for JSON Schema, ``PROTOBUF``)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        body = {"schema": text} if kind == "AVRO" else {"schema": text, "schemaType": kind}
        answer = requests.post(f"{self.url}/subjects/{subject}/versions", json=body,
                               headers={"Content-Type": "application/vnd.schemaregistry.v1+json"}, timeout=10)
        if answer.status_code != 200:
            raise RegistryError(f"registering under {subject} failed: HTTP {answer.status_code} {answer.text[:300]}")
        return int(answer.json()["id"])


if __name__ == "__main__":   # make fetch: download ahead of the tests
    print(ensure_app())
