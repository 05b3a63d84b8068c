"""The tests' AWS Glue (moto's, ``frazil_dev.moto_server``) refuses a table update against a version
that is no longer current, as AWS Glue does: Iceberg's Glue catalogs rely on it as their
compare-and-swap, and the Glue tests of frazil's commits under Spark maintenance mean nothing
without it (moto alone lets the later of two commits silently replace the earlier)."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from frazil_dev.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Server

pytestmark = [pytest.mark.integration]


def test_a_table_update_against_a_stale_version_is_a_concurrent_modification(s3: S3Server) -> None:
    glue = boto3.client("glue", endpoint_url=s3.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY)
    glue.create_database(DatabaseInput={"Name": "locked"})
    glue.create_table(DatabaseName="locked", TableInput={"Name": "t", "Parameters": {"metadata_location": "m0"}})
    version = glue.get_table(DatabaseName="locked", Name="t")["Table"]["VersionId"]
    glue.update_table(DatabaseName="locked", VersionId=version,
                      TableInput={"Name": "t", "Parameters": {"metadata_location": "m1"}})
    with pytest.raises(ClientError) as raised:   # a second writer that read the same version
        glue.update_table(DatabaseName="locked", VersionId=version,
                          TableInput={"Name": "t", "Parameters": {"metadata_location": "m2"}})
    assert raised.value.response["Error"]["Code"] == "ConcurrentModificationException"
    table = glue.get_table(DatabaseName="locked", Name="t")["Table"]
    assert table["Parameters"]["metadata_location"] == "m1"
    glue.update_table(DatabaseName="locked", VersionId=table["VersionId"],
                      TableInput={"Name": "t", "Parameters": {"metadata_location": "m2"}})
