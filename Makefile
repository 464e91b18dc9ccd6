# gridspan: `make demo` and `make test` do all set-up on a fresh Debian machine.
BUILD    ?= build
ASAN     ?= build-asan
BENCH    ?= build-bench
TYPE     ?= RelWithDebInfo
JOBS     ?= $(shell nproc)
LAUNCHER := $(shell command -v ccache >/dev/null 2>&1 && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
CMAKE    := cmake -G Ninja $(LAUNCHER)

.PHONY: all deps demo test sanitize bench install-check clean

all: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(TYPE)

$(ASAN)/build.ninja: | deps
	$(CMAKE) -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DGRIDSPAN_SANITIZE=ON -DGRIDSPAN_BUILD_BENCH=OFF

demo: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target gridspan_cli
	$(BUILD)/gridspan demo

test: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# intercept_tls_get_addr=0: GCC 12's sanitizer runtime takes a dynamic TLS block that
# happens to start 16 bytes into a page for glibc 2.19's header and has the leak check's
# tracer read the words before it, which kills it (SIGSEGV) at exit; NVRTC, dlopen'ed, has
# such blocks (google/sanitizers#1322). The leak check itself stays on.
sanitize: $(ASAN)/build.ninja
	cmake --build $(ASAN) -j $(JOBS)
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  GRIDSPAN_FUZZ_PROGRAMS=$${GRIDSPAN_FUZZ_PROGRAMS:-60} ctest --output-on-failure -j $(JOBS)

bench:
	@scripts/install-deps.sh libstarpu-dev
	$(CMAKE) -S . -B $(BENCH) -DCMAKE_BUILD_TYPE=Release -DGRIDSPAN_BUILD_TESTS=OFF
	cmake --build $(BENCH) -j $(JOBS) --target bench_overhead bench_demo
	scripts/run-bench.sh $(BENCH)

clean:
	rm -rf $(BUILD) $(ASAN) $(BENCH)
