# switchyard — plain GNU Makefile.
#
# Sources are found by folder, so adding a file never means editing this file:
#   common/ shm/ proto/        -> $(BUILD)/libswitchyard.a   (both daemons link it)
#   dataplane/ (+ subfolders)  -> $(BUILD)/libdataplane.a + switchyard-dataplane
#   controlplane/ (+ subfolders) -> $(BUILD)/libcontrolplane.a + switchyard-controlplane
#   tests/mockworker/          -> $(BUILD)/libmockworker.a + switchyard-mockworker
#   tests/fakecollector/main.c -> switchyard-fakecollector (one file)
#   tests/fakekube/            -> switchyard-fakekube
#   tests/unit/**/test_*.c     -> one cmocka binary each (folders mirror the product's)
#   tests/e2e/test_*.c         -> one cmocka binary each, linked with tests/e2e/harness*.c
# Each folder's main.c holds only main(); everything else goes into the folder's
# archive, so a unit test can #include the .c it tests (to reach static
# functions) without duplicate symbols: the linker takes from an archive only
# the objects it still needs.
#
# A test may need extra link flags (e.g. -Wl,--wrap=open): put them in
# tests/unit/FOLDER/test_NAME.ldflags, beside the test.

BUILD ?= build
CC ?= cc
PKGS := libmicrohttpd libcurl libprotobuf-c yaml-0.1 jansson libxxhash nettle gnutls libzmq msgpack

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Werror
OPT ?= -O2 -g
SAN_FLAGS ?=
CPPFLAGS += -D_GNU_SOURCE -I. -I$(BUILD)
CFLAGS += -std=c11 $(OPT) $(WARN) -pthread $(SAN_FLAGS) $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDFLAGS += -pthread $(SAN_FLAGS)
LDLIBS += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm
TEST_LDLIBS := $(shell pkg-config --libs cmocka 2>/dev/null)

PROTO_SRC := $(wildcard proto/*.proto)
PROTO_GEN_C := $(patsubst %.proto,$(BUILD)/%.pb-c.c,$(PROTO_SRC))
PROTO_GEN_H := $(PROTO_GEN_C:.c=.h)

LIB_SRCS := $(wildcard common/*.c shm/*.c proto/*.c)
DP_SRCS := $(filter-out dataplane/main.c,$(wildcard dataplane/*.c dataplane/*/*.c))
CP_SRCS := $(filter-out controlplane/main.c,$(wildcard controlplane/*.c controlplane/*/*.c))
MW_SRCS := $(filter-out tests/mockworker/main.c,$(wildcard tests/mockworker/*.c))
CTL_SRCS := $(wildcard ctl/*.c)
E2E_HARNESS_SRCS := $(wildcard tests/e2e/harness*.c)
# The load generator's modules; micro_*.c and floor_proxy.c are stand-alone
# programs (each has main()).
BENCH_SRCS := $(filter-out tests/bench/main.c tests/bench/micro_%.c tests/bench/floor_proxy.c,\
    $(wildcard tests/bench/*.c))

obj = $(patsubst %.c,$(BUILD)/%.o,$(filter %.c,$(1)))

LIB_OBJS := $(call obj,$(LIB_SRCS)) $(PROTO_GEN_C:.c=.o)
DP_OBJS := $(call obj,$(DP_SRCS))
CP_OBJS := $(call obj,$(CP_SRCS))
MW_OBJS := $(call obj,$(MW_SRCS))
E2E_HARNESS_OBJS := $(call obj,$(E2E_HARNESS_SRCS))

LIBSY := $(BUILD)/libswitchyard.a
LIBDP := $(BUILD)/libdataplane.a
LIBCP := $(BUILD)/libcontrolplane.a
LIBMW := $(BUILD)/libmockworker.a
ALL_LIBS := $(LIBDP) $(LIBCP) $(LIBMW) $(LIBSY)

BINS := $(BUILD)/switchyard-controlplane $(BUILD)/switchyard-dataplane
BINS += $(BUILD)/switchyard-ctl
ifneq ($(wildcard tests/mockworker/main.c),)
BINS += $(BUILD)/switchyard-mockworker
endif
ifneq ($(wildcard tests/fakekube/main.c),)
BINS += $(BUILD)/switchyard-fakekube
endif
ifneq ($(wildcard tests/bench/main.c),)
BINS += $(BUILD)/switchyard-bench
endif
ifneq ($(wildcard tests/soak/main.c),)
BINS += $(BUILD)/switchyard-soak
endif
ifneq ($(wildcard tests/fakecollector/main.c),)
BINS += $(BUILD)/switchyard-fakecollector
endif
ifneq ($(wildcard tests/bench/floor_proxy.c),)
BINS += $(BUILD)/switchyard-floor-proxy
endif

UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(sort $(shell find tests/unit -name 'test_*.c')))
E2E_TESTS := $(patsubst tests/e2e/%.c,$(BUILD)/tests/e2e/%,$(wildcard tests/e2e/test_*.c))
MICRO_BENCHES := $(patsubst tests/bench/%.c,$(BUILD)/tests/bench/%,$(wildcard tests/bench/micro_*.c))
# Fuzz targets (tests/fuzz/fuzz_*.c): each is a libFuzzer binary under
# make fuzz, and a replay_fuzz_* cmocka test of its seeds and past crashes
# in the normal suite.
FUZZ_TARGET_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_REPLAYS := $(patsubst tests/fuzz/%.c,$(BUILD)/tests/fuzz/replay_%,$(FUZZ_TARGET_SRCS))
FUZZERS := $(patsubst tests/fuzz/%.c,$(BUILD)/tests/fuzz/%,$(FUZZ_TARGET_SRCS))

.PHONY: all deps test check check-deploy check-layering check-mutants test-asan build-asan format format-check run bench bench-quick bench-pd bench-pd-quick clean fuzz fuzzers soak soak-quick
.DEFAULT_GOAL := all
# Keep generated sources (protobuf-c) instead of deleting them as intermediates.
.SECONDARY:

all: $(BINS)

# ---- generated protobuf-c code (never in git) --------------------------------
$(BUILD)/proto/%.pb-c.c $(BUILD)/proto/%.pb-c.h: proto/%.proto
	@mkdir -p $(BUILD)/proto
	protoc-c --c_out=$(BUILD) $<

# Every object may include a generated header: generate first.
$(BUILD)/%.o: %.c | $(PROTO_GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/proto/%.pb-c.o: $(BUILD)/proto/%.pb-c.c
	$(CC) $(CPPFLAGS) $(filter-out -Wshadow,$(CFLAGS)) -c $< -o $@

$(LIBSY): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(LIBDP): $(DP_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(LIBCP): $(CP_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(LIBMW): $(MW_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/switchyard-dataplane: $(BUILD)/dataplane/main.o $(LIBDP) $(LIBSY)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
$(BUILD)/switchyard-controlplane: $(BUILD)/controlplane/main.o $(LIBCP) $(LIBSY)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
$(BUILD)/switchyard-mockworker: $(BUILD)/tests/mockworker/main.o $(LIBMW) $(LIBSY)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
# The tests' fake OTLP collector (tracing).
$(BUILD)/switchyard-fakecollector: $(BUILD)/tests/fakecollector/main.o
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
# The fake Kubernetes API server for the discovery tests (docs/fakekube.md).
$(BUILD)/switchyard-fakekube: $(call obj,$(wildcard tests/fakekube/*.c)) $(LIBSY)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
# The admin API's command-line client (ctl/).
$(BUILD)/switchyard-ctl: $(call obj,$(CTL_SRCS)) $(LIBSY)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
$(BUILD)/switchyard-bench: $(BUILD)/tests/bench/main.o $(call obj,$(BENCH_SRCS)) $(LIBSY)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
# The chaos soak (tests/soak/): drives the real binaries with the e2e harness.
$(BUILD)/switchyard-soak: $(call obj,$(wildcard tests/soak/*.c)) $(E2E_HARNESS_OBJS) $(ALL_LIBS)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) $(TEST_LDLIBS) -o $@
# The proxy benchmark's "library floor" contender: MHD + libcurl only.
$(BUILD)/switchyard-floor-proxy: $(BUILD)/tests/bench/floor_proxy.o
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# The status page is embedded with .incbin (controlplane/admin/status_page.c).
$(BUILD)/controlplane/admin/status_page.o: controlplane/admin/status_page.html

# ---- tests -------------------------------------------------------------------
$(BUILD)/tests/unit/%: $(BUILD)/tests/unit/%.o $(ALL_LIBS)
	$(CC) $(LDFLAGS) $$(cat tests/unit/$*.ldflags 2>/dev/null) $< $(ALL_LIBS) $(LDLIBS) $(TEST_LDLIBS) -o $@
$(BUILD)/tests/e2e/%: $(BUILD)/tests/e2e/%.o $(E2E_HARNESS_OBJS) $(ALL_LIBS)
	$(CC) $(LDFLAGS) $< $(E2E_HARNESS_OBJS) $(ALL_LIBS) $(LDLIBS) $(TEST_LDLIBS) -o $@
$(BUILD)/tests/bench/%: $(BUILD)/tests/bench/%.o $(ALL_LIBS)
	$(CC) $(LDFLAGS) $< $(ALL_LIBS) $(LDLIBS) -o $@
$(BUILD)/tests/fuzz/replay_%: $(BUILD)/tests/fuzz/%.o $(BUILD)/tests/fuzz/replay_main.o $(ALL_LIBS)
	$(CC) $(LDFLAGS) $< $(BUILD)/tests/fuzz/replay_main.o $(ALL_LIBS) $(LDLIBS) $(TEST_LDLIBS) -o $@
$(BUILD)/tests/fuzz/fuzz_%: $(BUILD)/tests/fuzz/fuzz_%.o $(ALL_LIBS)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer $< $(ALL_LIBS) $(LDLIBS) -o $@

# Test-only data plane for tests/e2e/test_admission_race.c: the real one
# (main.o + the archives) with dp_adm_confirm wrapped by a gate
# (tests/e2e/race_confirm_wrap.c, -Wl,--wrap) that lets the test take a
# worker's last slot between the forwarder's guard and its re-check. A
# prerequisite of that test, so building the test builds it; never
# installed, never in $(BINS).
CONFIRM_RACE_DP := $(BUILD)/tests/e2e/switchyard-dataplane-confirm-race
$(CONFIRM_RACE_DP): $(BUILD)/dataplane/main.o $(BUILD)/tests/e2e/race_confirm_wrap.o $(LIBDP) $(LIBSY)
	$(CC) $(LDFLAGS) -Wl,--wrap=dp_adm_confirm $^ $(LDLIBS) -o $@
$(BUILD)/tests/e2e/test_admission_race: $(CONFIRM_RACE_DP)

deps:
	@deploy/install-deps.sh

# The README's test command. deps first: a fresh machine has nothing.
# check-deploy first so the suite's "N passed, N failed" stays the last line.
test: deps
	@$(MAKE) --no-print-directory check-deploy
	@$(MAKE) --no-print-directory check-layering
	@tests/check-runner.sh
	@tests/check-mutants.py --lint
	@$(MAKE) --no-print-directory check

# The curated mutants of tests/mutants/, each applied to a scratch copy of
# the tree and run against the tests that must catch it (minutes; not in CI).
# MUTANTS="a b" runs only those. `make test` runs its --lint: each mutant
# still applies and every invariant and security fix is attacked.
check-mutants: deps
	@tests/check-mutants.py $(if $(MUTANTS),--only "$(MUTANTS)")

# Include rules between folders and no include cycle between modules
# (tests/check-layering.py); its self-test first proves each rule fires.
check-layering:
	@tests/check-layering.py --self-test >/dev/null || tests/check-layering.py --self-test
	@tests/check-layering.py

check: $(BINS) $(UNIT_TESTS) $(E2E_TESTS) $(FUZZ_REPLAYS)
	@tests/run-tests.sh $(BUILD) $(UNIT_TESTS) $(FUZZ_REPLAYS) $(E2E_TESTS)

# deploy/: systemd units, Kubernetes manifests, Containerfile, Prometheus and
# Grafana, checked statically (deploy/check-deploy.sh); tools installed when missing.
check-deploy: $(BINS) $(LIBSY)
	@deploy/install-deps.sh deploy
	@deploy/check-deploy.sh $(BUILD)

# Same suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own tree.
test-asan: deps
	@$(MAKE) --no-print-directory BUILD=build/asan OPT='-O1 -g' \
	    SAN_FLAGS='-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all' check

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	@clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

# Runs the router on deploy/examples/local.yaml (read from the checkout);
# see README.
run: deps
	@$(MAKE) --no-print-directory all
	@deploy/run-local.sh $(BUILD)

# Benchmarks (tests/bench/run.sh): each section of tests/bench/sections/
# measures and writes data files, the report (tests/bench/report/) writes
# the page and plots from them. make bench writes docs/benchmarks.md and
# docs/bench-*.png; make bench-quick is a smoke run whose page and plots go
# to $(BUILD)/bench-quick/, never over docs/. BENCH_SECTIONS="proxy streams"
# runs only those sections and replaces only their parts of the page.
BENCH_SECTIONS ?= all

bench: deps
	@$(MAKE) --no-print-directory all $(MICRO_BENCHES)
	@tests/bench/run.sh $(BUILD) full $(BENCH_SECTIONS)

bench-quick: deps
	@$(MAKE) --no-print-directory all $(MICRO_BENCHES)
	@tests/bench/run.sh $(BUILD) quick $(BENCH_SECTIONS)

# The prefill/decode section of make bench alone (rewrites only its part of
# docs/benchmarks.md and docs/bench-pd.png; quick: of $(BUILD)/bench-quick/).
bench-pd: deps
	@$(MAKE) --no-print-directory all
	@tests/bench/run.sh $(BUILD) full pd

bench-pd-quick: deps
	@$(MAKE) --no-print-directory all
	@tests/bench/run.sh $(BUILD) quick pd

# Fuzzing (tests/fuzz/): every target built with clang, libFuzzer, ASan and
# UBSan in its own tree, then run FUZZ_SECONDS each from its seed corpus;
# the figures go to build/fuzz/report.md, a crash's input to
# build/fuzz/crashes/NAME/ (copy it into tests/fuzz/regress/NAME/ once fixed).
FUZZ_SECONDS ?= 60
FUZZ_BUILD := build/fuzz
fuzz: deps
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang OPT='-O1 -g' \
	    SAN_FLAGS='-fsanitize=address,undefined,fuzzer-no-link -fno-omit-frame-pointer -fno-sanitize-recover=all' fuzzers
	@tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzzers: $(FUZZERS)

# The chaos soak (tests/soak/main.c, docs/reliability.md): one node under
# open-loop traffic while faults are injected at random; exit status 1 on an
# unexplained failed request, a load that does not return to 0, an
# underflow, RSS growth over 10% or an fd leak. Report: $(BUILD)/soak/report.md.
# SOAK_SEED picks another fault and traffic sequence (the default repeats).
SOAK_SECONDS ?= 1200
SOAK_SEED ?= 2026
soak: all
	@mkdir -p $(BUILD)/soak
	SWITCHYARD_BUILD_DIR=$(BUILD) $(BUILD)/switchyard-soak --seconds $(SOAK_SECONDS) --seed $(SOAK_SEED) \
	    --report $(BUILD)/soak/report.md

soak-quick: all
	@mkdir -p $(BUILD)/soak
	SWITCHYARD_BUILD_DIR=$(BUILD) $(BUILD)/switchyard-soak --seconds 60 --seed $(SOAK_SEED) \
	    --report $(BUILD)/soak/report.md

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
