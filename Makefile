# nf: normalizing flows in C.  `make` builds libnf.a, libnf.so and nf; `make check` runs every test
# suite in the float and the double build.  Variants: NF_DOUBLE=1 (double precision), SANITIZE=1
# (AddressSanitizer + UndefinedBehaviorSanitizer).  Objects live under build/<variant>/.

VERSION   := 0.1.0
PREFIX    ?= /usr/local
CC        ?= gcc
PKGS      := gsl hdf5-serial fftw3 fftw3f cairo
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
OPT := -O2 -march=native
ifeq ($(SANITIZE),1)
  VARIANT := $(VARIANT)-san
  OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
endif
B := build/$(VARIANT)

CFLAGS  ?=
# -fno-math-errno: nf never reads errno after a math call, and without it a loop calling sqrt
# cannot be vectorised (each call would have to be able to set errno).
CFLAGS  += -fno-math-errno
CFLAGS  += -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wpedantic -fopenmp -fPIC -g $(OPT) $(DEFS) \
           -I. $(PKG_CFLAGS)
LDLIBS  := $(PKG_LIBS) -fopenmp -lm
LDFLAGS += $(filter -fsanitize%,$(OPT))

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

.PHONY: all deps check check-one check-variant install demo bench clean
all: deps $(B)/libnf.a $(B)/libnf.so $(B)/nf

deps:
	@bash scripts/deps.sh

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(B)/libnf.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/libnf.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS) $(LDLIBS)

$(B)/nf: $(APP_OBJ) $(B)/libnf.a
	$(CC) -o $@ $(APP_OBJ) $(B)/libnf.a $(LDFLAGS) $(LDLIBS)

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
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@DEFS@|$(filter -DNF_DOUBLE%,$(DEFS))|g' \
	  nf.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/nf.pc

# deps first, then a fresh make: pkg-config's flags are read once the packages are there.
demo: deps
	@$(MAKE) --no-print-directory all
	@bash scripts/demo.sh $(B)/nf

bench: deps
	@$(MAKE) --no-print-directory all
	@bash bench/run.sh

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(APP_OBJ:.o=.d)
