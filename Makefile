# reshard: `make` builds, `make demo` runs the main job, `make test` runs
# every test, `make bench` runs the benchmarks. Each installs missing
# Debian packages first (scripts/bootstrap.sh).

BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all build bootstrap configure demo test bench format clean

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

bench: build
	@scripts/bench.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD)
