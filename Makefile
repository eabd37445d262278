# reshard: `make` builds, `make demo` runs the main job, `make test` runs
# every test, `make check` runs the unit tests under sanitizers and the
# fuzzers (scripts/check.sh, docs/reliability.md), `make bench` runs the
# benchmarks. Each installs missing Debian packages first
# (scripts/bootstrap.sh).

BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all build bootstrap configure demo test check fuzz bench format clean

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

# Sanitizer trees build-asan and build-tsan, then the fuzzers for
# FUZZ_SECONDS each (see scripts/check.sh for the knobs).
check: bootstrap
	JOBS=$(JOBS) scripts/check.sh

# Only the fuzzers (FUZZ_SECONDS each).
fuzz: bootstrap
	JOBS=$(JOBS) CHECK_PASSES=fuzz scripts/check.sh

bench: build
	@scripts/bench.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-tsan
