"""A local S3-compatible object store for tests: moto's standalone server (PyPI ``moto[s3]``),
on 127.0.0.1. The same server answers the AWS Glue API (moto's emulation of it), for the Glue
catalog's tests, with Glue's optimistic lock on table updates that moto lacks (``moto_server``).
pyiceberg (pyarrow's S3 filesystem) and Spark (Iceberg's ``S3FileIO`` from the
``iceberg-aws-bundle`` jar) both write and read the warehouse there, as they would on S3 or
MinIO. Objects live in the server's memory: fine for tests, not for benchmarks.

    with S3Server.start(workdir) as s3:
        props = s3.catalog_properties("frazil")   # warehouse s3://frazil/wh plus the s3.* settings
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from frazil_dev.kafka_broker import free_port
from frazil_dev.server import ServerProcess

ACCESS_KEY = "frazil-test"
SECRET_KEY = "frazil-test-secret"
REGION = "us-east-1"
START_TIMEOUT_S = 30.0


class S3Error(RuntimeError):
    """The local S3 server could not be started."""


class S3Server(ServerProcess):
    LOG = "s3.log"
    WHAT = "the S3 server (moto; is moto[s3] installed?)"
    Error = S3Error

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, workdir: Path) -> S3Server:
        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        # moto's server with Glue's optimistic lock (moto_server.py); this package on the child's path
        here = str(Path(__file__).resolve().parent.parent)
        path = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
        server = cls.spawn([sys.executable, "-m", "frazil_dev.moto_server", "-H", "127.0.0.1", "-p", str(port)],
                           workdir, port, env={**os.environ, "PYTHONPATH": path})
        return server.ready(f"{server.endpoint}/moto-api/", START_TIMEOUT_S, every_s=0.2)

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

    def glue_catalog_properties(self, bucket: str) -> dict[str, str]:
        """An AWS Glue catalog on this server (moto's Glue) with its warehouse in ``bucket``. The
        credentials are not properties: both engines take them from the AWS SDK's own chain, as in
        production (``credentials_env()`` here)."""
        return {**self.catalog_properties(bucket), "type": "glue", "glue.endpoint": self.endpoint}

    @staticmethod
    def credentials_env() -> dict[str, str]:
        """The environment variables the AWS SDKs (boto3, the Java SDK) read the test keys from."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}
