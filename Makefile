# revivify: every target creates .venv and installs what it needs (a Java 17+ runtime for
# PySpark included), so a fresh clone needs nothing but python3, make and apt-get. The venv
# gets every optional extra (pyproject.toml: check = z3 + Hypothesis, spark = PySpark +
# pyarrow + pandas, dev = the tools): a server alone needs none of them.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
JAVA_STAMP := $(VENV)/.java
CHROMIUM_STAMP := $(VENV)/.chromium
NFT_STAMP := $(VENV)/.nft
PYTEST_FLAGS ?=
# make test runs the suite in parallel workers (pytest-xdist): most tests wait on real
# processes, so two workers on two cores roughly halve the wall time. Tests that need a
# Spark session share one worker (tests/conftest.py puts them in one xdist group, so one JVM).
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2

.PHONY: all test lint fast demo soak bench prove explore clean java chromium nft venv nemesis mutants

all: test

# Every install comes from requirements.lock: every package the venv holds, direct and
# transitive, at one version with its hashes (pip refuses anything else). What builds a
# source release (PySpark publishes no wheel) and revivify itself is the lock's setuptools,
# installed first from requirements-build.lock (the same versions, wheels only): no build
# isolation, which would fetch the newest setuptools. `make lock` rewrites both.
LOCK := requirements.lock
BUILD_LOCK := requirements-build.lock
$(STAMP): pyproject.toml $(LOCK) $(BUILD_LOCK)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes --no-deps --only-binary :all: -r $(BUILD_LOCK)
	$(BIN)/pip install -q --require-hashes --no-deps --no-build-isolation -r $(LOCK)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/pip check
	touch $(STAMP)

venv: $(STAMP)

# Rewrite requirements.lock: the newest versions that pyproject.toml's ranges allow, for every
# extra and for the build (setuptools, wheel), on every platform (--universal) from Python
# 3.11 up, with hashes. Run it to take new releases on purpose (then `make test`, and commit
# the lock with what the new versions needed), or after changing a range in pyproject.toml.
# LOCK_ARGS='--upgrade-package msgspec' moves one package; by default everything moves.
LOCK_ARGS ?= --upgrade
.PHONY: lock
lock: $(STAMP)
	printf 'setuptools>=77\nwheel>=0.43\n' | $(BIN)/uv pip compile pyproject.toml - \
	  --all-extras --universal --python-version 3.11 --generate-hashes --quiet \
	  --custom-compile-command 'make lock' $(LOCK_ARGS) -o $(LOCK)
	printf 'setuptools\nwheel\n' | $(BIN)/uv pip compile - -c $(LOCK) --universal \
	  --python-version 3.11 --generate-hashes --quiet --custom-compile-command 'make lock' \
	  -o $(BUILD_LOCK)
	echo 'pysyncobj==0.3.17' | $(BIN)/uv pip compile - --universal --python-version 3.11 \
	  --generate-hashes --quiet --custom-compile-command 'make lock' -o bench/requirements.lock

# Are pyproject.toml's ranges honest? A venv of its own with the NEWEST versions they allow
# (no lock), then lint and the fast tests on it, so a release that breaks revivify (msgspec
# 0.23 changed its JSON Schema output) is seen here before it reaches a lock or a user. Not in
# `make test`: its result depends on the day it runs, not on the change under test.
LATEST := .venv-latest
.PHONY: test-latest
test-latest: $(JAVA_STAMP) $(CHROMIUM_STAMP) $(MYPY_LINKS)
	rm -rf $(LATEST) && $(PY) -m venv $(LATEST)
	$(LATEST)/bin/pip install -q --upgrade pip
	$(LATEST)/bin/pip install -q --upgrade --upgrade-strategy eager -e '.[dev,check,spark]'
	$(LATEST)/bin/python tests/cli/lock_diff.py $(LOCK)
	$(LATEST)/bin/ruff check spec contract checker impl tests bench
	$(LATEST)/bin/mypy -p revivify.spec -p revivify.contract -p revivify.checker -p revivify.impl
	$(LATEST)/bin/pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_FLAGS) \
	  --deselect tests/cli/test_lock.py::test_the_venv_holds_the_lock  # this venv is not the lock, on purpose

# PySpark needs a JVM, 17 or newer. Install one from Debian's packages when missing.
$(JAVA_STAMP): | $(STAMP)
	@ver=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$ver" ] || [ "$$ver" -lt 17 ]; then \
	  echo "installing a Java 17 runtime for PySpark (found: '$${ver:-none}')"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	fi
	java -version 2>&1 | head -1
	touch $(JAVA_STAMP)

java: $(JAVA_STAMP)

# The status pages' browser tests (tests/web) drive Debian's headless Chromium through its
# chromedriver (Selenium): install both from Debian's packages when missing. Nothing
# downloads a browser build (Selenium's own manager is never used: the tests name the
# binaries).
$(CHROMIUM_STAMP): | $(STAMP)
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  echo "installing chromium and chromium-driver for the status pages' browser tests"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi
	/usr/bin/chromedriver --version | head -1
	touch $(CHROMIUM_STAMP)

chromium: $(CHROMIUM_STAMP)

# The nemesis makes its partitions in the kernel (every server in a network namespace, a cut
# is nftables DROP rules: impl/testing/nemesis/netns.py), which needs root, ip and nft. As
# root, install nftables and iproute2 from Debian's packages when missing. Not root: nothing
# to install that could help (the kernel tests skip; the nemesis needs --partitions rpc), and
# no stamp, so that a later run as root installs them.
$(NFT_STAMP): | $(STAMP)
	@if [ "$$(id -u)" = 0 ] && ! { command -v nft && command -v ip; } >/dev/null; then \
	  echo "installing nftables and iproute2 for the nemesis's kernel partitions"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq nftables iproute2 >/dev/null; \
	fi
	@if command -v nft >/dev/null && command -v ip >/dev/null; then touch $(NFT_STAMP); \
	else echo "no nft/ip (not root?): nemesis partitions only with --partitions rpc"; fi

nft: $(NFT_STAMP)

# mypy cannot follow the editable install's import hook, so give it a path where the
# import names exist: .mypy-path/revivify/{spec,contract,checker,impl} -> the real folders.
# A file target per link, so a tree made before a package was added gains its link.
MYPY_LINKS := $(addprefix .mypy-path/revivify/,spec contract checker impl)
$(MYPY_LINKS):
	mkdir -p .mypy-path/revivify
	ln -sfn ../../$(notdir $@) $@

# tests/ are type-checked too, in mypy's lenient mode (the code under test is strict, above):
# a test may call an untyped helper or define an untyped fixture, and a `type: ignore` that
# a change made unnecessary is no error. Test modules have no package (pytest puts each
# folder on sys.path), so this mode is flags here, not a per-module section of pyproject.toml.
MYPY_TESTS_FLAGS := --allow-untyped-calls --allow-untyped-defs --allow-incomplete-defs \
  --no-warn-unused-ignores

lint: $(STAMP) $(MYPY_LINKS)
	$(BIN)/ruff check spec contract checker impl tests bench
	$(BIN)/mypy -p revivify.spec -p revivify.contract -p revivify.checker -p revivify.impl
	$(BIN)/mypy $(MYPY_TESTS_FLAGS) tests
	$(BIN)/lint-imports --no-cache --no-logo
	@echo "lint: clean"

test: lint $(JAVA_STAMP) $(CHROMIUM_STAMP) $(NFT_STAMP)
	$(BIN)/pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_FLAGS)

fast: $(STAMP) $(NFT_STAMP)
	$(BIN)/pytest -q -m "not slow and not spark" -x $(PYTEST_FLAGS)

# The Spark engine on a real standalone cluster on 127.0.0.1 (a master and two workers
# started from the pyspark install, torn down after): same findings as the local engine,
# work on both workers. Also part of `make test` (marked spark); its slow case (the
# dataframe plan) with PYTEST_FLAGS='-m "slow or not slow"'.
.PHONY: check-spark-cluster
check-spark-cluster: $(STAMP) $(JAVA_STAMP)
	$(BIN)/pytest -q -m "not slow" tests/trace/test_spark_standalone.py $(PYTEST_FLAGS)

prove: $(STAMP)
	$(BIN)/revivify prove

explore: $(STAMP)
	$(BIN)/revivify explore

demo: $(STAMP) $(JAVA_STAMP)
	$(BIN)/python -m revivify.impl.cli.demo

soak: $(STAMP) $(JAVA_STAMP)
	HYPOTHESIS_PROFILE=soak $(BIN)/pytest -q -m "slow or not slow" $(PYTEST_FLAGS)

# Every bench/*.py; tserver.py through its own target (it installs its peers first).
bench: $(STAMP) $(JAVA_STAMP)
	for b in bench/*.py; do [ "$$b" = bench/tserver.py ] && continue; \
	  echo "== $$b"; $(BIN)/python $$b || exit 1; done
	$(MAKE) bench-tserver

# Replicated writes on revivify vs etcd 3.4 vs PySyncObj, and leader failover (bench/tserver.py).
# Installs what it compares against: etcd from Debian's packages, pysyncobj from its own lock
# (bench/requirements.lock: a source release only, built with the venv's locked setuptools).
# BENCH_TSERVER_ARGS=--quick for a smoke run.
.PHONY: bench-tserver
bench-tserver: $(STAMP)
	@command -v etcd >/dev/null || { echo "installing etcd-server (Debian)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq etcd-server >/dev/null; }
	$(BIN)/pip install -q --require-hashes --no-deps --no-build-isolation -r bench/requirements.lock
	$(BIN)/python bench/tserver.py $(BENCH_TSERVER_ARGS)

# Leader-master failover (kill -9 to the first CreateTable answered, >= 10 trials) and
# CreateTable latency for 1, 10, 100 tablets x 3 replicas to RUNNING (bench/master.py;
# `make bench` runs it too). BENCH_MASTER_ARGS=--quick for a smoke run.
.PHONY: bench-master
bench-master: $(STAMP)
	$(BIN)/python bench/master.py $(BENCH_MASTER_ARGS)

# Tablet copy rate (>= 500 MB tablet) vs cp + sync, and startup of a server holding 1,000
# tablets, half of them tombstones, vs 1,000 READY (bench/tablet_copy.py; `make bench` runs it too).
# BENCH_COPY_ARGS=--quick for a smoke run.
.PHONY: bench-copy
bench-copy: $(STAMP)
	$(BIN)/python bench/tablet_copy.py $(BENCH_COPY_ARGS)

# The nemesis (issue 20): real processes, each in a network namespace of its own (issue 32;
# PARTITIONS=rpc: on 127.0.0.1, cuts in the RPC layer), under seeded kills, pauses, partitions
# and disk faults while clients run; exit 0 only if no acknowledged write was lost, the
# histories are linearizable and the traces clean. The fault schedule is a function of SEED.
# PROFILE: standard (every fault, tablet servers alone), masters (the same with 3 masters),
# disk (disk faults only), short (what make test runs). The summary table goes to stdout,
# the JSON to NEMESIS_DIR/summary.json (a new temporary directory unless NEMESIS_DIR is set).
DURATION ?= 120
SEED ?= 1
PROFILE ?= standard
NEMESIS_DIR ?=
PARTITIONS ?= kernel
nemesis: $(STAMP) $(NFT_STAMP)
	$(BIN)/python -m revivify.impl.testing.nemesis --profile $(PROFILE) --seed $(SEED) \
	  --duration $(DURATION) --partitions $(PARTITIONS) \
	  $(if $(NEMESIS_DIR),--workdir $(NEMESIS_DIR) --keep)

# Mutants of the implementation (issue 20): seeded bugs in impl/, injected from outside
# (tests/impl_mutants/sitecustomize.py), each run against the in-process scenarios + trace
# checker, then the tablet-server/consensus/storage tests, then the short nemesis, until one
# catches it. Prints the table and the kill rate (exit 1 below 90%); JSON in MUTANTS_JSON.
# MUTANTS='a b' runs only those; MUTANT_DETECTORS=sim,tests,nemesis picks the detectors.
MUTANTS ?=
MUTANTS_JSON ?= build/mutants.json
MUTANT_DETECTORS ?= sim,tests,nemesis
mutants: $(STAMP) $(NFT_STAMP)
	$(BIN)/python tests/impl_mutants/impl_mutant_run.py --json $(MUTANTS_JSON) \
	  --detectors $(MUTANT_DETECTORS) $(if $(MUTANTS),--only $(MUTANTS))

clean:
	rm -rf $(VENV) $(LATEST) .mypy-path .mypy_cache .pytest_cache .ruff_cache .hypothesis build *.egg-info \
	  .import_linter_cache .grimp_cache
