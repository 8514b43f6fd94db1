# nf: normalizing flows in C.  `make` builds libnf.a, libnf.so and nf; `make check` runs every test
# suite in the float and the double build, then the pool's suites under ThreadSanitizer.  Variants:
# NF_DOUBLE=1 (double precision), SANITIZE=1 (AddressSanitizer + UndefinedBehaviorSanitizer, with
# float-to-integer conversions out of range, which GCC's `undefined` leaves out),
# SANITIZE=thread (ThreadSanitizer).  Objects live under build/<variant>/ (build/float-clang
# and so on for a compiler other than gcc).

VERSION   := 0.1.0
PREFIX    ?= /usr/local
CC        ?= gcc
PKGS      := gsl hdf5-serial fftw3 fftw3f cairo zlib
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# GSL's pkg-config adds -lgslcblas; we drop it so GSL's and our BLAS calls both run on OpenBLAS.
PKG_LIBS   = $(filter-out -lgslcblas,$(shell pkg-config --libs $(PKGS) 2>/dev/null)) -lopenblas -lgif
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)

VARIANT := float
DEFS    := -DNF_VERSION=\"$(VERSION)\"
ifeq ($(NF_DOUBLE),1)
  VARIANT := double
  DEFS    += -DNF_DOUBLE=1
endif
# Portable: the x86-64 baseline (no -march=native), so a binary runs on any x86-64 CPU and under
# valgrind.  Speed comes from run-time dispatch instead: the AVX-512 matrix kernel is the one file
# compiled for AVX-512 and runs where cpuid finds it (core/blas.h), and the hot elementwise loops
# carry AVX2 clones (core/simd.h).  `make OPT="-O2 -march=native"` still builds for this CPU only.
OPT := -O2
ifeq ($(SANITIZE),1)
  VARIANT := $(VARIANT)-san
  OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined,float-cast-overflow \
             -fno-sanitize-recover=undefined,float-cast-overflow
endif
# ThreadSanitizer: the worker pool (core/threads.c) and what runs on it; `make check-tsan`.
ifeq ($(SANITIZE),thread)
  VARIANT := $(VARIANT)-tsan
  OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
endif
# Another compiler gets its own objects: CC=clang builds under build/float-clang (CC=gcc or cc, the
# default, under build/float), so `CC=clang make check` never mixes its objects with gcc's.
CC_NAME := $(notdir $(lastword $(CC)))
ifeq ($(filter gcc cc,$(CC_NAME)),)
  VARIANT := $(VARIANT)-$(CC_NAME)
endif
B := build/$(VARIANT)

CFLAGS  ?=
# -fno-math-errno: nf never reads errno after a math call, and without it a loop calling sqrt
# cannot be vectorised (each call would have to be able to set errno).
CFLAGS  += -fno-math-errno
# -ffp-contract=off: no a * b + c fused into an FMA behind the code's back.  GCC does not fuse under
# -std=c11 anyway; clang does by default wherever FMA is available, which made the AVX-512 clones of
# core/simd.h (clang: FMA) compute other bits than the OpenMP regions inside them (clang: the
# baseline), so one and two threads differed (check_nn_blocks, test_mlp_threads).  Explicit FMA
# intrinsics (core/blas_avx512.c) are unaffected.
CFLAGS  += -ffp-contract=off
CFLAGS  += -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wpedantic -fopenmp -fPIC -g $(OPT) $(DEFS) \
           -I. $(PKG_CFLAGS)
# clang 14 writes DWARF 5 by default, which valgrind 3.19 (Debian 12) cannot read ("unhandled dwarf2
# abbrev form code 0x25", and `valgrind nf` fails): clang builds write DWARF 4.  -Wno-pass-failed:
# clang reports each `omp simd` loop it leaves scalar (all of them under the sanitizers' -O1, a few
# max-reductions at -O2); the loops are right either way, only slower, and gcc's builds are the
# ones measured.
ifneq ($(findstring clang,$(CC_NAME)),)
  CFLAGS += -gdwarf-4 -Wno-pass-failed
endif
LDLIBS  := $(PKG_LIBS) -fopenmp -lm
LDFLAGS += $(filter -fsanitize%,$(OPT))

# MPI (data-parallel training, apps/mpi.c): nf is built with Open MPI when mpicc is found; MPI=0
# builds without it, MPI=1 insists (and `make deps` installs it).  The library never links MPI.
ifeq ($(MPI),)
  MPI := $(if $(shell command -v mpicc 2>/dev/null),1,0)
endif
ifeq ($(MPI),1)
  MPI_CFLAGS = -DNF_MPI=1 $(shell mpicc --showme:compile 2>/dev/null)
  MPI_LIBS   = $(shell mpicc --showme:link 2>/dev/null)
endif

LIB_DIRS := core nn distributions flows training datasets plot
LIB_SRC  := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c))
APP_SRC  := $(wildcard apps/*.c)
TEST_SRC := $(wildcard tests/check_*.c)
TEST_UTIL:= $(wildcard tests/testutil.c)
EX_SRC   := $(wildcard examples/*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(B)/%.o)
APP_OBJ  := $(APP_SRC:%.c=$(B)/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(B)/tests/%)
EX_BIN   := $(EX_SRC:examples/%.c=$(B)/examples/%)

.PHONY: all compile deps check check-one check-variant check-tsan tsan-run bench-build install demo demo-tpp bench clean
# deps first, then a fresh make: pkg-config's flags are read when the Makefile is parsed, so a make
# that installed the packages must not build with what it read before they were there.
all: deps
	@$(MAKE) --no-print-directory compile
compile: $(B)/libnf.a $(B)/libnf.so $(B)/nf

deps:
	@bash scripts/deps.sh

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# The AVX-512 kernels, and only they, are compiled for AVX-512 (x86-64): the matrix product and the
# attention's QK norm; core/blas.c and nn/attention.c call them only on a CPU that has AVX-512.
ifneq ($(filter x86_64%,$(shell $(CC) -dumpmachine 2>/dev/null)),)
$(B)/core/blas_avx512.o $(B)/nn/attention_avx512.o $(B)/nn/layernorm_avx512.o: CFLAGS += -mavx512f
endif

$(B)/apps/mpi.o: CFLAGS += $(MPI_CFLAGS)

$(B)/libnf.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/libnf.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS) $(LDLIBS)

$(B)/nf: $(APP_OBJ) $(B)/libnf.a
	$(CC) -o $@ $(APP_OBJ) $(B)/libnf.a $(LDFLAGS) $(LDLIBS) $(MPI_LIBS)

$(B)/tests/%: tests/%.c $(TEST_UTIL) $(B)/libnf.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(TEST_UTIL) $(B)/libnf.a $(LDFLAGS) $(CHECK_LIBS) $(LDLIBS)

$(B)/examples/%: examples/%.c $(B)/libnf.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(B)/libnf.a $(LDFLAGS) $(LDLIBS)

# One variant: build everything, run each suite, then the examples and the command-line scripts.
check-variant: $(B)/libnf.a $(B)/nf $(TEST_BIN) $(EX_BIN)
	@NF_BUILD=$(B) bash scripts/run_tests.sh $(TEST_BIN) -- $(EX_BIN)

check: deps
	@$(MAKE) --no-print-directory check-variant NF_DOUBLE=
	@$(MAKE) --no-print-directory check-variant NF_DOUBLE=1
	@$(MAKE) --no-print-directory bench-build NF_DOUBLE=
	@$(MAKE) --no-print-directory check-tsan
	@$(MAKE) --no-print-directory fuzz-smoke

# The benchmark programs (bench/run.sh takes them from here), linked whole-archive (bench_train wraps
# nf_gemm and nf_gemm_bias to count the step's products), so that an interface change cannot leave `make bench` broken
# unseen (it once did: a call missing nf_flow_nll_step's row indices).
BENCH_PROGS := bench_train bench_sample bench_data bench_dump bench_dependent dependent_lookups
bench-build: $(B)/libnf.a
	@mkdir -p $(B)/bench
	@for p in $(BENCH_PROGS); do \
	  wrap=; [ $$p = bench_train ] && wrap='-Wl,--wrap=nf_gemm -Wl,--wrap=nf_gemm_bias'; \
	  $(CC) $(CFLAGS) bench/$$p.c -Wl,--whole-archive $(B)/libnf.a -Wl,--no-whole-archive $$wrap $(LDLIBS) \
	    -o $(B)/bench/$$p || exit 1; \
	done; echo "ok    bench programs build: $(BENCH_PROGS)"

# ThreadSanitizer over the suites that run on the worker pool and OpenMP (build/float-tsan-clang).  With
# clang: its OpenMP runtime tells the sanitizer about its barriers through the Archer tool, where
# GCC's libgomp, uninstrumented, would have every OpenMP region reported as a race.  Skipped, with
# a line saying so, where clang or Archer is missing.
TSAN_CC     ?= clang
TSAN_SUITES := check_threads check_blas check_nn check_rqspline check_bij_autoregressive check_nn_blocks check_gru check_trainer check_flow check_attention check_dependent check_image_model check_micro_batch check_source check_causal
check-tsan:
	@archer=$$($(TSAN_CC) -print-resource-dir 2>/dev/null)/../../libarcher.so; \
	if [ -f "$$archer" ]; then \
	  $(MAKE) --no-print-directory SANITIZE=thread CC=$(TSAN_CC) NF_DOUBLE= tsan-run TSAN_ARCHER="$$archer"; \
	else echo "skip  tsan: $(TSAN_CC) with OpenMP's Archer tool is not installed (apt-get install clang libomp-dev)"; fi

tsan-run: $(TSAN_SUITES:%=$(B)/tests/%)
	@export OMP_TOOL_LIBRARIES=$(TSAN_ARCHER) TSAN_OPTIONS="ignore_noninstrumented_modules=1 die_after_fork=0"; \
	failed=0; for t in $^; do echo "== $$t (ThreadSanitizer)"; \
	  if ! $$t 2>&1 | tee $$t.log | grep -v '^Running suite'; then :; fi; \
	  if grep -q 'WARNING: ThreadSanitizer' $$t.log || ! grep -q '^100%' $$t.log; then failed=$$((failed+1)); echo "FAILED: $$t"; fi; \
	done; echo "$(B): $(words $^) suites under ThreadSanitizer, $$failed failed"; [ $$failed = 0 ]

# Fast loop while developing: one variant only.
check-one: deps
	@$(MAKE) --no-print-directory check-variant

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/nf
	install -m 755 $(B)/nf $(DESTDIR)$(PREFIX)/bin/nf
	install -m 644 $(B)/libnf.a $(B)/libnf.so $(DESTDIR)$(PREFIX)/lib/
	for d in $(LIB_DIRS); do install -d $(DESTDIR)$(PREFIX)/include/nf/$$d; \
	  install -m 644 $$d/*.h $(DESTDIR)$(PREFIX)/include/nf/$$d/; done
	install -m 644 nf.h $(DESTDIR)$(PREFIX)/include/nf/nf.h
	install -d $(DESTDIR)$(PREFIX)/share/nf
	install -m 644 data/digits.csv.gz $(DESTDIR)$(PREFIX)/share/nf/digits.csv.gz
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@DEFS@|$(filter -DNF_DOUBLE%,$(DEFS))|g' \
	  nf.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/nf.pc

demo: deps
	@$(MAKE) --no-print-directory compile
	@bash scripts/demo.sh $(B)/nf

# A point process on a shared benchmark set with its true likelihood (scripts/demo_tpp.sh).
demo-tpp: deps
	@$(MAKE) --no-print-directory compile
	@bash scripts/demo_tpp.sh $(B)/nf

bench: deps
	@$(MAKE) --no-print-directory compile
	@bash bench/run.sh

clean:
	rm -rf build

# ---- fuzzing ------------------------------------------------------------------------------------
# `make fuzz` builds libFuzzer harnesses (tests/fuzz/fuzz_*.c: CSV, NPY, the flow-spec parser, model
# files, event sequences, data files) with clang, AddressSanitizer and UndefinedBehaviorSanitizer, against a
# copy of the library built the same way under build/fuzz/.  `make fuzz-run FUZZ_SECONDS=600` runs
# each on its seed corpus (tests/fuzz/corpus/) and carries on past crashes, then lists every input
# that failed and where; `make check` ends with a 3-second run of each (fuzz-smoke) when clang and
# its libFuzzer are installed.  Results: docs/HARDENING.md.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 600
FUZZ_B       ?= build/fuzz
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN     := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_B)/%)
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_B)/%.o)
FUZZ_CFLAGS   = -std=c11 -D_POSIX_C_SOURCE=200809L -fno-math-errno -fopenmp -g -O1 -fno-omit-frame-pointer \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-pass-failed -DNF_NO_CLONES -DNF_VERSION=\"$(VERSION)\" -I. \
                $(PKG_CFLAGS)

.PHONY: fuzz fuzz-run fuzz-smoke
fuzz: $(FUZZ_BIN)

$(FUZZ_B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_B)/libnf.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_B)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(FUZZ_B)/libnf.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_B)/libnf.a $(LDLIBS)

fuzz-run: fuzz
	@bash tests/fuzz/run.sh --keep-going $(FUZZ_SECONDS) $(FUZZ_BIN)

# The short run of `make check`: skipped (with a line saying so) without clang's libFuzzer.
fuzz-smoke:
	@if printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' | \
	    $(FUZZ_CC) -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory fuzz >/dev/null && bash tests/fuzz/run.sh 3 $(FUZZ_BIN); \
	else echo "skip  fuzz: $(FUZZ_CC) with libFuzzer is not installed (apt-get install clang)"; fi

-include $(LIB_OBJ:.o=.d) $(APP_OBJ:.o=.d) $(FUZZ_LIB_OBJ:.o=.d)
