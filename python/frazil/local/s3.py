"""A local S3-compatible object store for tests: moto's standalone server (PyPI ``moto[s3]``),
on 127.0.0.1. pyiceberg (pyarrow's S3 filesystem) and Spark (Iceberg's ``S3FileIO`` from the
``iceberg-aws-bundle`` jar) both write and read the warehouse there, as they would on S3 or
MinIO. Objects live in the server's memory: fine for tests, not for benchmarks.

    with S3Server.start(workdir) as s3:
        props = s3.catalog_properties("frazil")   # warehouse s3://frazil/wh plus the s3.* settings
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import requests

from frazil.local.kafka_broker import free_port

ACCESS_KEY = "frazil-test"
SECRET_KEY = "frazil-test-secret"
REGION = "us-east-1"
START_TIMEOUT_S = 30.0


class S3Error(RuntimeError):
    """The local S3 server could not be started."""


@dataclass
class S3Server:
    workdir: Path
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, workdir: Path) -> S3Server:
        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        with open(workdir / "s3.log", "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir)
        server = cls(workdir, port, proc)
        try:
            server._wait_ready()
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = (self.workdir / "s3.log").read_text(errors="replace")[-3000:]
                raise S3Error(f"the S3 server (moto) exited during start-up; is moto[s3] installed?\n{tail}")
            try:
                if requests.get(f"{self.endpoint}/moto-api/", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise S3Error(f"the S3 server did not answer within {START_TIMEOUT_S:.0f}s")

    def create_bucket(self, bucket: str) -> None:
        from pyarrow import fs

        s3 = fs.S3FileSystem(endpoint_override=self.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                             region=REGION, allow_bucket_creation=True)
        s3.create_dir(bucket)

    def catalog_properties(self, bucket: str, prefix: str = "wh") -> dict[str, str]:
        """The catalog properties both engines need for a warehouse in ``bucket`` (created here):
        pyiceberg reads ``s3.*`` and ``client.region``; Iceberg's Java FileIO also needs ``io-impl``
        and, for an endpoint that is not an IP address, ``s3.path-style-access``."""
        self.create_bucket(bucket)
        return {"warehouse": f"s3://{bucket}/{prefix}", "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
                "s3.endpoint": self.endpoint, "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY,
                "s3.path-style-access": "true", "client.region": REGION}

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> S3Server:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
