"""Developer tooling: a local Kafka broker for tests, the demo and benchmarks."""
