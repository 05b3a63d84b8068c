"""The frazil configuration: one TOML file, validated once at the edge, frozen.

``load(path)`` and ``parse(data, base=..., source=...)`` give a ``Config``; every error is a
``ConfigError`` naming the key and the fix. The models (config/models.py, config/tables.py)
declare each key once; docs/configuration.md lists them, and a test keeps the two in step.
"""


from frazil.config.load import load, parse
from frazil.config.models import (
    AVRO_FORMATS,
    FETCH_MAX_BYTES,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    CatalogConfig,
    Config,
    CoordinationConfig,
    KafkaConfig,
    KafkaSecurity,
    MaintenanceConfig,
    MetricsConfig,
    RegistryConfig,
    SparkConfig,
    ValuesConfig,
)
from frazil.config.tables import (
    DEBEZIUM,
    OP_COLUMN,
    STAGING_SUFFIX,
    ChangesConfig,
    Column,
    DynamicConfig,
    TableConfig,
    merge_target,
    normalise,
)
from frazil.config.types import META_COLUMNS, ColumnType, PartitionField

__all__ = [
    "AVRO_FORMATS", "DEBEZIUM", "FETCH_MAX_BYTES", "META_COLUMNS", "OP_COLUMN", "SASL_MECHANISMS", "SECURITY_PROTOCOLS",
    "STAGING_SUFFIX", "CatalogConfig", "ChangesConfig", "Column", "ColumnType", "Config", "CoordinationConfig",
    "DynamicConfig", "KafkaConfig", "KafkaSecurity", "MaintenanceConfig", "MetricsConfig", "PartitionField",
    "RegistryConfig", "SparkConfig", "TableConfig", "ValuesConfig", "load", "merge_target", "normalise", "parse",
]
