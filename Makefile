VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install deps system-deps spark-classes run kafka test verify verify-records test-setup lint typecheck migrate bench fuzz clean

# the hot modules compiled with mypyc into .build/compiled (app/compiled.py); does nothing when
# the build matches the sources, and the node runs them interpreted when it does not
install: $(STAMP)
	$(PY) -c 'from app import compiled; print("compiled hot path:", compiled.build())'
	-$(PY) -m pipeline.class_archive

# Spark's classes for local audits, loaded and verified once (pipeline/class_archive.py): built
# by install when java is there, again here after deps installed it; a no-op when up to date
spark-classes: install deps
	$(PY) -m pipeline.class_archive

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# what the suite needs beyond .venv: PostgreSQL's binaries, Java + Maven, Node + npm, chromium
# from Debian when missing (scripts/deps.sh), then the Kafka clients, broker and kafkajs the
# tests drive (tests/support/fetch_deps.py, which needs the venv)
deps: system-deps $(STAMP)
	$(PY) -m tests.support.fetch_deps

system-deps:
	bash scripts/deps.sh

# a topic to point consumers at right away; COORD_TOPICS=... make run overrides it
run: export COORD_TOPICS ?= demo:6
run: install
	mkdir -p data
	$(VENV)/bin/coordinator serve

# Apache Kafka from Maven in the foreground on 127.0.0.1:19092 with topic demo: an upstream
# for gateway mode by hand (COORD_UPSTREAM_BOOTSTRAP=127.0.0.1:19092 make run)
kafka: deps
	$(PY) -m tests.support.kafka_broker --port 19092 --topics demo:6

migrate: install
	$(VENV)/bin/coordinator migrate

LINTED := app storage api pipeline cli bench tests membership examples

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy

# three phases (tests/conftest.py): the tests that bound no latency on three workers against the
# compiled build; the suites that drive the core and the wire edge again, interpreted
# (COORD_PURE_PYTHON=1, with the `pure_python` tests that patch its internals); then the
# `serial` ones alone. All always run, and the target fails if any failed.
PYTEST := $(PY) -m pytest -q -p no:cacheprovider --durations=10
# tests/conftest.py PURE_SUITES: the same list, which refuses a pure_python test outside it
PURE_SUITES := tests/unit tests/protocol tests/runtime tests/fuzz
test: test-setup
	$(PYTEST) -n 3 --dist loadfile -m "not serial and not timed and not pure_python and not verify"; parallel=$$?; \
	COORD_PURE_PYTHON=1 $(PYTEST) -n 3 --dist loadfile -m "not serial and not timed and not verify" $(PURE_SUITES); pure=$$?; \
	$(PYTEST) -n 2 --dist loadfile -m timed; timed=$$?; \
	$(PYTEST) -m serial; serial=$$?; \
	echo "make test: parallel phase exit $$parallel, pure-Python phase exit $$pure, timed phase exit $$timed, serial phase exit $$serial"; \
	test $$parallel -eq 0 && test $$pure -eq 0 && test $$timed -eq 0 && test $$serial -eq 0

# the slow fault scenarios kept out of make test (the `verify` marker)
verify: test-setup
	$(PYTEST) -m verify tests

# the proof on real records alone, the heavy variants included (docs/verification.md): Kafka's
# verifiers under every fault, the Go clients, franz-go's own suite (~25 min here)
RECORD_SUITES := tests/unit/test_verifiable_checks.py tests/gateway/test_verifiable.py \
	tests/gateway/test_verifiable_faults.py tests/gateway/test_verifiable_brokers.py \
	tests/gateway/test_go_clients.py tests/gateway/test_kgo_suite.py
verify-records: test-setup
	$(PYTEST) -rP -m "verify or not verify" $(RECORD_SUITES)

# make test's setup at once: pip, the compiled build and mypy (CPU) beside apt-get and the
# Maven and npm downloads (network); spark-classes waits for both. Each part's output is
# printed whole when it ends.
test-setup:
	$(MAKE) --no-print-directory -j4 --output-sync=target install deps spark-classes lint

# every benchmark figure next to its floor or peer; rewrites BENCHMARKS.md (~40 min here)
bench: install deps spark-classes
	$(PY) -m bench

# the decoding fuzzer for longer than make test's run (FUZZ_SECONDS, default 10 min)
FUZZ_SECONDS ?= 600
fuzz: install
	COORD_FUZZ_SECONDS=$(FUZZ_SECONDS) $(PY) -m pytest -q -p no:cacheprovider tests/fuzz

clean:
	rm -rf $(VENV) data .build
