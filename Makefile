# reshard: `make` builds, `make demo` runs the main job, `make test` runs
# every test, `make check` runs the unit tests under sanitizers and the
# fuzzers (scripts/check.sh, docs/reliability.md), `make bench` runs the
# benchmarks, `make install` installs the library (PREFIX, default
# /usr/local; docs/architecture.md), `make install-python` the Python
# package (into PREFIX/lib/python3.X/dist-packages; docs/python.md),
# `make pip-check` checks `pip install .` into a venv (scripts/pip_check.sh).
# Each installs missing Debian packages first (scripts/bootstrap.sh).

BUILD ?= build
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local

.PHONY: all build bootstrap configure demo test check fuzz bench install format
.PHONY: install-python pip-check conformance m2n-venv
.PHONY: clean

all: build

bootstrap:
	@scripts/bootstrap.sh

$(BUILD)/build.ninja:
	@scripts/bootstrap.sh
	cmake -S . -B $(BUILD) -G Ninja

configure: $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The NCCL M2N backend's build-only venv, $(BUILD)/m2n-venv (the
# nccl-extensions and nvidia-nccl-cu13 wheels, scripts/m2n_venv.sh): a
# configure that finds it builds the backend's plugin (cmake/m2n.cmake).
# `make test` does not need it; CI makes it first.
m2n-venv:
	scripts/m2n_venv.sh $(BUILD)/m2n-venv

# Sanitizer trees build-asan and build-tsan, then the fuzzers for
# FUZZ_SECONDS each (see scripts/check.sh for the knobs).
check: bootstrap
	JOBS=$(JOBS) scripts/check.sh

# Only the fuzzers (FUZZ_SECONDS each).
fuzz: bootstrap
	JOBS=$(JOBS) CHECK_PASSES=fuzz scripts/check.sh

bench: build
	@scripts/bench.sh $(BUILD) $(BASELINE)

# Not part of `make test` or CI: vLLM's own loader and transformers' own
# checkpoints against reshard, in a venv of its own (build-conformance/venv,
# vLLM and transformers from PyPI, several GB; docs/engines.md).
# CONFORMANCE_FLAGS go to the driver (--only vllm|hf, --filter, --engine).
conformance: build
	tests/conformance/run.sh $(BUILD) $(CONFORMANCE_FLAGS)

# Public headers, the static libraries, the CMake package (find_package(
# reshard CONFIG) -> reshard::reshard) and reshard.pc under PREFIX.
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# The package `reshard` (pure-Python modules and the native _reshard)
# under PREFIX/lib/python3.X/dist-packages, which Debian's /usr/bin/python3
# searches for PREFIX=/usr/local.
install-python: build
	cmake --install $(BUILD) --prefix $(PREFIX) --component python

# `pip install .` from a fresh clone of HEAD into a new venv over Debian's
# python3, then import it (scripts/pip_check.sh; PyPI: the build backend).
pip-check: bootstrap
	scripts/pip_check.sh

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-tsan
