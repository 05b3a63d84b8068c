# Every task is a target here; README and CI call these. `make help` lists them.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
RUST_SOURCES := $(shell find rust/src -name '*.rs') rust/Cargo.toml Cargo.toml Cargo.lock
export FRAZIL_CACHE ?= $(HOME)/.cache/frazil
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help venv build bench-deps demo test test-fast lint test-rust test-loom test-python test-matrix stubtest typecheck chaos chaos-tests bench bench-maintenance bench-profile bench-native bench-txlog bench-keyindex bench-ingest-txlog eos outage kafka-fetch spark-fetch clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(VENV)/.venv-ok:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q 'maturin==1.16.*'
	touch $@

venv: $(VENV)/.venv-ok ## create the virtualenv with the build tool

$(VENV)/.build-ok: $(VENV)/.venv-ok $(RUST_SOURCES) pyproject.toml
	@echo "building the native extension (release) and installing frazil with its dependencies..."
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release -q -E dev,glue,hive
	@# an editable install has no bytecode (a wheel's install writes it): every process would compile
	@# frazil's modules again where PYTHONDONTWRITEBYTECODE is set; stale files are ignored by mtime
	$(PY) -m compileall -q python/frazil >/dev/null
	touch $@

build: $(VENV)/.build-ok ## build the Rust extension into the virtualenv (frazil._native)

$(VENV)/.bench-ok: $(VENV)/.build-ok
	@echo "installing the benchmark extras (psutil, matplotlib, py-spy) and fetching the Spark and Kafka Connect jars..."
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release -q -E dev,glue,hive,bench
	$(PY) -m frazil.spark.jars fetch --kafka >/dev/null
	$(PY) benches/e2e_systems/kafka_connect.py --fetch >/dev/null
	touch $@

bench-deps: $(VENV)/.bench-ok ## the benchmark extras, Spark's jars and the Kafka Connect Iceberg sink's jars

spark-fetch: $(VENV)/.venv-ok ## fetch the Spark jars into $(FRAZIL_CACHE)
	$(PY) -m frazil.spark.jars fetch --kafka

kafka-fetch: $(VENV)/.venv-ok ## fetch the Kafka broker jars into $(FRAZIL_CACHE)
	PYTHONPATH=dev $(PY) -m frazil_dev.kafka_broker fetch

demo: build ## end to end: local Kafka, 200k sample events, frazil run, results and a query
	PYTHONPATH=dev $(PY) -m frazil_dev.demo --records $${DEMO_RECORDS:-200000}

test-rust: ## Rust unit tests of the native core
	cargo test -q --no-default-features -p frazil-native

# the shard alone, with loom's atomics (rust/loom-shard): not all of frazil-native a second time
test-loom: ## loom model checks of the buffer's lock-free shard: 2 producers and a drainer, every interleaving up to 3 preemptions
	cargo test -q -p frazil-shard-loom

stubtest: build ## check python/frazil/_native.pyi against the built module
	$(PY) -m mypy.stubtest frazil._native --mypy-config-file pyproject.toml

typecheck: build ## mypy --strict on python/frazil and dev/frazil_dev
	$(PY) -m mypy

# one clippy pass, with the python feature: it compiles every line the pure core has as well (no code
# is only built without the feature), and a second pass without it cost a minute and a half
lint: build ## ruff, cargo fmt --check, cargo clippy -D warnings (every target, the bindings included), mypy --strict, stubtest
	$(PY) -m ruff check python tests benches dev
	cargo fmt -p frazil-native --check
	PYO3_PYTHON=$(abspath $(PY)) cargo clippy -q --all-targets --features python -p frazil-native -- -D warnings
	$(MAKE) --no-print-directory typecheck stubtest

test-python: build ## Python tests: unit, native, integration (real Kafka + catalog), Spark, chaos
	$(PY) -m frazil.spark.jars fetch --aws >/dev/null
	PYTHONPATH=dev $(PY) -m frazil_dev.rest_catalog >/dev/null
	PYTHONPATH=dev $(PY) -m frazil_dev.kafka_connect >/dev/null
	PYTHONPATH=dev $(PY) -m frazil_dev.oauth_server >/dev/null
	PYTHONPATH=dev $(PY) -m frazil_dev.hive_metastore >/dev/null
	$(PY) -m pytest -m "not matrix" $${PYTEST_ARGS:-}

# what make test runs on one catalog or at a smaller size, on the others and at full size
test-matrix: build ## the catalog matrix make test samples (maintenance on SQLite, PostgreSQL, Glue) and the 3M-record bulk catch-up
	$(PY) -m frazil.spark.jars fetch --aws >/dev/null
	$(PY) -m pytest -m matrix $${PYTEST_ARGS:-}
	FRAZIL_BULK_RECORDS=$${FRAZIL_BULK_RECORDS:-3000000} $(PY) -m pytest $${PYTEST_ARGS:-} \
		tests/spark/test_backfill.py -k bulk_catch_up

test: lint test-rust test-loom test-python ## everything CI runs: lint, Rust tests, loom model checks, every Python test against real servers

test-fast: build ## the tests that need no server (unit and native): a couple of minutes, for while you work
	$(PY) -m pytest tests/unit tests/native -q $${PYTEST_ARGS:-}

chaos: build ## the seeded chaos run: 500 faults of every kind, several at once; independent verifier; CHAOS_ARGS="--catalog postgresql --mode single --brokers 3"; benches/results/chaos-*.json
	$(PY) -m frazil.spark.jars fetch >/dev/null
	PYTHONPATH=tests:dev $(PY) -m harness.chaos $${CHAOS_ARGS:-}

# the kill runs at their full size (make test runs them shorter)
chaos-tests: build ## the crash, zombie and outage tests alone, verbose, the kill runs at full size
	FRAZIL_CHAOS_RECORDS=$${FRAZIL_CHAOS_RECORDS:-300000} FRAZIL_CHAOS_KILLS=$${FRAZIL_CHAOS_KILLS:-24} \
	FRAZIL_EOS_RECORDS=$${FRAZIL_EOS_RECORDS:-500000} FRAZIL_EOS_KILLS=$${FRAZIL_EOS_KILLS:-30} \
	FRAZIL_CHAOS_CHANGES=$${FRAZIL_CHAOS_CHANGES:-12000} FRAZIL_CHAOS_ROUNDS=$${FRAZIL_CHAOS_ROUNDS:-2} \
	$(PY) -m pytest tests/chaos -v -s
	FRAZIL_KILL_RUNS=all $(PY) -m pytest tests/spark/test_mutations_spark.py -v -k killed_mid_merge

bench: bench-deps ## end to end vs Spark SS, the Iceberg Kafka Connect sink, a plain Python loop, the ceilings; e2e.json + png; then the upsert workload
	$(PY) benches/e2e.py $${BENCH_ARGS:-}
	$(PY) benches/upsert.py

bench-upsert: bench-deps ## upserts: frazil's keyed tables vs Spark SS MERGE INTO; changes/s, produce-to-queryable latency, read cost before/after compaction; upsert.json
	$(PY) benches/upsert.py $${BENCH_ARGS:-}

bench-maintenance: build ## commit latency and metadata over 1,000 cycles with maintenance on/off, compaction, bulk writes vs Spark; maintenance.json
	$(PY) benches/maintenance.py $${BENCH_ARGS:-}

bench-profile: bench-deps ## where frazil's time goes: py-spy over frazil landing each workload; e2e_profile.json
	$(PY) benches/e2e.py --profile --systems frazil --no-latency $${BENCH_ARGS:-}

bench-coordinator: build ## one coordinator's CPU per commit cycle at 1k-100k partitions x 10-1,000 tables, simulated workers, stub and SQLite catalog; coordinator_scale.json
	$(PY) benches/coordinator_scale.py $${BENCH_ARGS:-}

bench-native: build ## decode throughput: native buffer vs pyarrow.json vs json.loads, 1 and 2 threads; shard contention, lock-free vs mutex
	$(PY) benches/native.py --records $${BENCH_RECORDS:-200000}

bench-txlog: build ## transaction-log appends/s by fsync policy and group size
	$(PY) benches/txlog.py

bench-keyindex: build ## a keyed table's key index: built from the table vs read from its checkpoint, moved by one file vs rebuilt; keyindex.json
	$(PY) benches/keyindex.py $${BENCH_ARGS:-}

bench-ingest-txlog: build ## ingest throughput with the transaction log fsynced vs not, same data, one run
	$(PY) benches/ingest_txlog.py

bench-startup: build ## start-up: import, --help, and process start to the first fetch of a real run (median of 9); BENCH_ARGS="--baseline COMMIT" measures another commit beside it; startup.json
	$(PY) benches/startup.py $${BENCH_ARGS:-}

eos: build ## 3 distributed workers, 1M records, 30+ SIGKILLs; independent count; benches/results/eos.json
	PYTHONPATH=tests:dev $(PY) -m harness.eos --records $${EOS_RECORDS:-1000000} --kills $${EOS_KILLS:-30}

outage: build ## 60 s catalog outage under steady load; writes benches/results/outage.json
	PYTHONPATH=tests:dev $(PY) -m harness.outage --outage-s $${OUTAGE_S:-60}

clean: ## remove build output, the virtualenv and local run folders
	rm -rf target $(VENV) .run python/frazil/*.so
