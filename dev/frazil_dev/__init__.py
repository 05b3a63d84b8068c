"""frazil's development package: what the tests, the benchmarks, the chaos harnesses and
``make demo`` start on this machine, kept out of the product. It is not in the wheel, and
nothing under ``python/frazil`` may import it (``tests/unit/test_product_imports.py``).

- test servers: a single-node Kafka broker with SASL and TLS listeners (``kafka_broker``) and
  Kafka's own Java producer and consumer tools (``kafka_tools``); PostgreSQL (``postgres``), with
  logical replication on; a Kafka Connect worker running Debezium's PostgreSQL connector
  (``kafka_connect``);
  Apache Iceberg's REST catalog fixture (``rest_catalog``); S3 (and Glue) through moto (``s3``);
  an OAuth 2.0 server, Keycloak (``oauth_server``); a
  Confluent-compatible schema registry (``schema_registry``); what the HTTP ones share (``server``);
- the sample workload (``workload``): seeded clickstream events with their columns, topic
  creation and a round-robin producer, shared by the demo, tests, harnesses and benches;
- the demo (``demo``, ``python -m frazil_dev.demo``, ``make demo``).

Importable with ``dev`` on the path: pytest's ``pythonpath``, ``PYTHONPATH`` in the Makefile's
targets, and ``benches/_dev.py`` for the benchmarks. Jars come through ``frazil.spark.maven``
into the same cache as Spark's.
"""
