"""A catalog server that answers but lacks a call pyiceberg makes is a set-up error, not an outage."""

from __future__ import annotations

from thrift.Thrift import TApplicationException

from frazil.config import CatalogConfig
from frazil.errors import ConfigError
from frazil.iceberg.catalog_errors import unserved_call


def test_a_hive_4_metastore_is_named_as_the_wrong_version() -> None:
    cfg = CatalogConfig("lake", {"type": "hive", "uri": "thrift://metastore:9083"})
    error = unserved_call(cfg, TApplicationException(TApplicationException.UNKNOWN_METHOD,
                                                     "Invalid method name: 'get_table'"))
    assert isinstance(error, ConfigError) and error.exit_code == 2
    assert "Invalid method name: 'get_table'" in str(error) and "3.1 or older" in str(error)
    # anything else a metastore raises stays an outage for the caller to report
    assert unserved_call(cfg, TApplicationException(TApplicationException.INTERNAL_ERROR, "boom")) is None
    assert unserved_call(cfg, ConnectionRefusedError()) is None
