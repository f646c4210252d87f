# mpmd - the two commands a new user needs:
#   make demo   install what it needs, build the GPT example alone (CPU,
#               in-process ranks: no MPI, CUDA or test tools), train it
#               pipelined over 4 in-process ranks (see README for the time)
#   make test   install what is missing, build, run every test (then every
#               benchmark once at its smallest sizes, and the demo in 2 steps)
# Also: make (build into build/), make bench, make test-sanitize, make test-no-mpi, make fuzz, make format,
# make format-check, make clean;
# on a machine with an NVIDIA GPU: make test-gpu, make bench-gpu.

BUILD ?= build
SAN_BUILD ?= build-sanitize
NOMPI_BUILD ?= build-nompi
DEMO_BUILD ?= build-demo
FUZZ_BUILD ?= build-fuzz
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Debian packages the build needs.
PACKAGES = cmake make gcc libc6-dev pkg-config libopenblas-openmp-dev libopenmpi-dev openmpi-bin \
  libcjson-dev libpcre2-dev python3 python3-torch python3-numpy
# What the demo needs: the library and the GPT example, on the CPU.
DEMO_PACKAGES = cmake make gcc libc6-dev pkg-config libopenblas-openmp-dev libcjson-dev libpcre2-dev

.PHONY: all deps build test test-sanitize test-no-mpi fuzz test-gpu demo demo-run bench bench-gpu format format-check clean

all: build

deps:
	@$(call install_missing,$(PACKAGES))

# $(call install_missing,PACKAGES): install the missing ones with apt-get (as
# root), or print the apt-get line and stop (otherwise).
install_missing = missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) || exit 1; \
	  else \
	    echo "mpmd needs these Debian packages. Run:"; \
	    echo "  sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# Every test; then every benchmark once at its smallest sizes (a smoke run
# that catches a broken benchmark, timing nothing) and the demo in 2 steps.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	MPMD_BENCH_SMOKE=1 $(MAKE) --no-print-directory bench
	$(MAKE) --no-print-directory demo-run GPT=$(BUILD)/examples/gpt DEMO_OUT=$(BUILD) DEMO_STEPS=2

# The tests that need a GPU (CTest label gpu; they skip where there is none).
# A build with CUDA needs nvcc (/usr/local/cuda/bin or on PATH).
test-gpu: build
	cd $(BUILD) && ctest --output-on-failure -L gpu

# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer, the MPI
# runtime included (its processes run instrumented under mpirun; Open MPI's
# own allocations are left out of the leak check by library name, see
# tests/CMakeLists.txt); the install test runs in the plain build only.
test-sanitize: deps
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DMPMD_SANITIZE=ON -DMPMD_BUILD_BENCH=OFF -DMPMD_WITH_MPI=ON \
	  -DMPMD_WITH_CUDA=OFF
	cmake --build $(SAN_BUILD) -j $(JOBS)
	cd $(SAN_BUILD) && MPMD_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) -E '^install_'

# mpmd without MPI (and without CUDA): it builds, and the tests pass, the MPI
# ones left out and the MPI messages saying this build has none.
test-no-mpi: deps
	cmake -S . -B $(NOMPI_BUILD) -DCMAKE_BUILD_TYPE=Release -DMPMD_BUILD_BENCH=OFF -DMPMD_WITH_MPI=OFF -DMPMD_WITH_CUDA=OFF
	cmake --build $(NOMPI_BUILD) -j $(JOBS)
	cd $(NOMPI_BUILD) && MPMD_TEST_QUICK=1 ctest --output-on-failure -j $(JOBS) -E '^install_'

# The fuzzers of tests/fuzz (checkpoint reader, schedule parser, graph
# builder, the GPT example's files, LLaMA model directories, tokenizer.json,
# the planner's descriptions), each for FUZZ_SECONDS from its seed corpus, under ASan and UBSan
# (FUZZ_SEED: libFuzzer's random seed, 0 for a new one each run);
# a crash, a leak or a broken promise fails, its input kept in
# $(FUZZ_BUILD)/artifacts. Needs clang and its libFuzzer (installed here).
FUZZ_SECONDS ?= 60
FUZZ_SEED ?= 0
FUZZ_PACKAGES = clang libclang-rt-14-dev libomp-14-dev
fuzz: deps
	@$(call install_missing,$(FUZZ_PACKAGES))
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPMD_FUZZ=ON \
	  -DMPMD_BUILD_TESTS=OFF -DMPMD_BUILD_BENCH=OFF -DMPMD_WITH_MPI=OFF -DMPMD_WITH_CUDA=OFF
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzzers
	tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_SEED)

# The demo builds what it runs, in a build of its own: the library (CPU
# backend, in-process runtime) and the GPT example, no tests, benchmarks,
# MPI or CUDA; `make test` runs it from the full build.
DEMO_STEPS ?= 80
demo:
	@$(call install_missing,$(DEMO_PACKAGES))
	cmake -S . -B $(DEMO_BUILD) -DCMAKE_BUILD_TYPE=Release -DMPMD_BUILD_TESTS=OFF -DMPMD_BUILD_BENCH=OFF \
	  -DMPMD_WITH_MPI=OFF -DMPMD_WITH_CUDA=OFF
	cmake --build $(DEMO_BUILD) -j $(JOBS) --target gpt
	@$(MAKE) --no-print-directory demo-run GPT=$(DEMO_BUILD)/examples/gpt DEMO_OUT=$(DEMO_BUILD)

demo-run:
	./$(GPT) --layers 8 --width 256 --heads 8 --seq 64 --batch 16 --microbatches 8 --steps $(DEMO_STEPS) \
	  --schedule std1f1b --stages 4 --ranks 4 --log-every 10 \
	  --trace $(DEMO_OUT)/demo-trace.json --timeline $(DEMO_OUT)/demo-timeline.svg
	@echo "the last step's trace: $(DEMO_OUT)/demo-trace.json (open in ui.perfetto.dev), timeline: $(DEMO_OUT)/demo-timeline.svg"

bench: build
	@for b in $(BUILD)/bench/bench_*; do [ -x "$$b" ] && echo "== $$b" && "$$b" || exit 1; done
	@if [ -x $(BUILD)/bench/mpi_bench ]; then echo "== $(BUILD)/bench/mpi_bench (2 MPI processes)"; \
	  tests/mpirun.sh shm 2 $(BUILD)/bench/mpi_bench; fi

# GPT-2 124M (batch 16 x 1024) on one GPU: mpmd on one rank and as a 4-stage
# pipeline of 4 ranks sharing the GPU, then, in the same run, the PyTorch
# reference (TORCH_ANCHOR, eager and compiled) when python3 has torch.
TORCH_ANCHOR ?= ../shared/anchors/torch_gpt2.py
bench-gpu: build
	./$(BUILD)/bench/gpu_bench --profile
	@if [ -f "$(TORCH_ANCHOR)" ] && python3 -c "import torch" 2>/dev/null; then \
	  echo "== PyTorch eager ($(TORCH_ANCHOR) --compile 0)"; python3 "$(TORCH_ANCHOR)" --compile 0; \
	  echo "== PyTorch compiled ($(TORCH_ANCHOR) --compile 1)"; python3 "$(TORCH_ANCHOR)" --compile 1; \
	else echo "bench-gpu: no PyTorch reference run (needs $(TORCH_ANCHOR) and python3 with torch)"; fi

# The C, header and CUDA sources formatted by the checked-in .clang-format.
# The C, CUDA and header files as .clang-format lays them out: make format
# rewrites them, make format-check (CI) fails naming each file that differs.
FORMAT_FILES = git ls-files '*.c' '*.h' '*.cu' '*.cuh'
format:
	@$(call install_missing,clang-format)
	$(FORMAT_FILES) | xargs clang-format -i

format-check:
	@$(call install_missing,clang-format)
	@$(FORMAT_FILES) | xargs clang-format --dry-run --Werror 2>&1 | grep "error:" | sed 's/:[0-9]*:[0-9]*: error:.*//' | sort -u | \
	  { bad=$$(cat); if [ -n "$$bad" ]; then echo "not formatted (make format fixes them):"; echo "$$bad"; exit 1; fi; \
	    echo "format-check: every file as .clang-format lays it out"; }

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(NOMPI_BUILD) $(FUZZ_BUILD) $(DEMO_BUILD)
