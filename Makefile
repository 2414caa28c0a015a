# tidemark: everything installs into .venv/ at the repository root.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHECKOV := $(VENV)/checkov/bin/checkov
PROMTOOL := $(BIN)/promtool

.PHONY: install demo test hunt lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@# checkov pins older boto3 and packaging than the project's: it gets a venv of its own
	@test -x $(CHECKOV) || { $(PYTHON) -m venv $(VENV)/checkov && \
		$(VENV)/checkov/bin/python -m pip install --quiet --upgrade pip && \
		$(VENV)/checkov/bin/python -m pip install --quiet 'checkov>=3.2,<4'; }
	@# promtool (the chart's alert tests) from Debian's prometheus package, only the one binary
	@test -x $(PROMTOOL) || { d=$$(mktemp -d) && cd $$d && \
		{ apt-get download prometheus >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && apt-get download prometheus >/dev/null 2>&1; }; } && \
		dpkg-deb --fsys-tarfile prometheus_*.deb | tar -xO ./usr/bin/promtool > $(CURDIR)/$(PROMTOOL) && \
		chmod +x $(CURDIR)/$(PROMTOOL); rm -rf $$d; } || \
		{ rm -f $(PROMTOOL); echo "promtool could not be installed: the alert tests will skip and say why"; }
	@touch $(STAMP)

## demo: a table through local Spark read by tidemark and Apache's reader; two writers meeting at the
## writer-coordinator; the services and the operator reacting to a table's events; a log file inspected
demo: install
	$(BIN)/python scripts/demo_table.py demo-output/table
	$(BIN)/python scripts/demo_writers.py demo-output/writers
	$(BIN)/python scripts/demo_services.py demo-output/services
	$(BIN)/python scripts/demo_logformat.py demo-output/logformat

## test: lint, type-check, check the layering, then run every test tier; TEST_WORKERS processes
## share the test files (most tests wait on Spark's JVM, a broker or a child process, not the CPU)
TEST_WORKERS ?= 2
test: install lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

## hunt: the randomized model-based tests with new random examples (the default run replays a
## fixed set); TIDEMARK_MODEL_EXAMPLES=N for more
hunt: install
	TIDEMARK_MODEL_HUNT=1 TIDEMARK_MODEL_EXAMPLES=$${TIDEMARK_MODEL_EXAMPLES:-500} \
		$(BIN)/python -m pytest -p no:cacheprovider --timeout=0 tests/table_services/test_model_stateful.py \
		tests/table/test_model_writers.py --hypothesis-show-statistics

lint: install
	$(BIN)/ruff check libs services operator tests benchmarks scripts
	$(BIN)/ruff format --check libs services operator tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

## bench: benchmarks, each figure beside its anchor measured in the same run
bench: install
	$(BIN)/python -m benchmarks.bench_logformat
	$(BIN)/python -m benchmarks.bench_table
	$(BIN)/python -m benchmarks.bench_json_input
	$(BIN)/python -m benchmarks.bench_spark_scale
	$(BIN)/python -m benchmarks.bench_reconcile
	$(BIN)/python -m benchmarks.bench_services
	$(BIN)/python -m benchmarks.bench_concurrency
	$(BIN)/python -m benchmarks.bench_coordinator
	$(BIN)/python -m benchmarks.bench_events
	$(BIN)/python -m benchmarks.bench_kafka_security
	$(BIN)/python -m benchmarks.bench_operator

clean:
	rm -rf $(VENV) demo-output .pytest_cache .mypy_cache .ruff_cache .hypothesis benchmarks/.data
