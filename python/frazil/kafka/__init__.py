"""What every Kafka client of frazil shares: connection settings with TLS and SASL, one clear
error for a broker that cannot be reached (``clients``), and the raw fetch that hands partition
fetches to the native reader whole (``fetch``). The source, the control channel and the
dead-letter sink build on it."""
