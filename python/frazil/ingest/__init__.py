"""The data path into the buffers: the Kafka source (``source``, ``fetch``), the loop
(``loop``: poll, control hand-off, backpressure, drain, rebalances), intake (``intake``: what
each table takes of a fetch, decided once; direct decoding), routing (``routing``, ``fanout``),
tables opened on their first records (``opening``), schema changes (``evolve``, ``avro``,
``registry``) and bad records (``bad_records``); ``assemble`` puts one process's parts together."""
