# g4tp build. `make` builds build/g4tp; `make check` builds and runs the whole test suite
# (normal build and the ASan+UBSan build). BUILD=dir picks another build folder, SAN=1 the
# sanitizer flavour. Sources are found by wildcard: a new src/<dir>/*.c or tests/unit/test_*.c
# is picked up without editing this file.

CC       ?= cc
BUILD    ?= build
SAN      ?= 0
OPT      ?= -O2

BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -g -pthread \
               -Iinclude -Isrc -fno-strict-aliasing
ifeq ($(SAN),1)
  BASE_CFLAGS += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDSAN := -fsanitize=address,undefined
else
  BASE_CFLAGS += $(OPT)
  LDSAN :=
endif

# MPI is optional: built in when mpicc is present (the test script installs OpenMPI).
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
ifneq ($(strip $(MPI_CFLAGS)$(MPI_LIBS)),)
  BASE_CFLAGS += -DG4_HAVE_MPI=1
endif

LIBS := -ljansson -lxxhash -lmicrohttpd -lpng -ljpeg -lwebpdemux -lwebp -lcurl -lm $(MPI_LIBS)

# The shared library's objects (install, below): position-independent, exporting only the API.
PIC_FLAGS := -fPIC -fvisibility=hidden

# Per-ISA kernel files get their own flags; nothing else is built for a specific CPU.
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni -mfma -mf16c

# The build configuration (compiler, flags, MPI on/off) is recorded in $(BUILD)/config.stamp,
# rewritten only when it changes; every object depends on it, so a build made before OpenMPI was
# installed (or with other flags) is rebuilt instead of silently kept.
BUILD_CONFIG := $(CC) | $(BASE_CFLAGS) | $(MPI_CFLAGS) | $(MPI_LIBS) | $(AVX2_FLAGS) | $(AVX512_FLAGS) | $(LDSAN) | $(LIBS) | $(PIC_FLAGS)
CONFIG_STAMP := $(BUILD)/config.stamp

LIB_SRCS := $(filter-out src/cli/%,$(wildcard src/*/*.c))
CLI_SRCS := $(wildcard src/cli/*.c)
TEST_SRCS := $(wildcard tests/unit/test_*.c)

LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
# The chat page's files (src/server/ui/) become byte arrays in a generated C file, so that the
# binary carries them (src/server/ui.h; scripts/embed-files.sh).
UI_FILES := $(sort $(wildcard src/server/ui/*))
UI_GEN   := $(BUILD)/gen/ui_files.c
LIB_OBJS += $(BUILD)/gen/ui_files.o
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/%.o)
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

.PHONY: all clean check test-bins bench-bins FORCE
all: $(BUILD)/g4tp

$(CONFIG_STAMP): FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' '$(BUILD_CONFIG)' | cmp -s - $@ || printf '%s\n' '$(BUILD_CONFIG)' > $@

$(BUILD)/%_avx2.o: %_avx2.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(MPI_CFLAGS) $(AVX2_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%_avx512.o: %_avx512.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(MPI_CFLAGS) $(AVX512_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(MPI_CFLAGS) -MMD -MP -c $< -o $@

$(UI_GEN): scripts/embed-files.sh $(UI_FILES)
	@mkdir -p $(dir $@)
	sh scripts/embed-files.sh $@ $(UI_FILES)

$(BUILD)/gen/ui_files.o $(BUILD)/pic/gen/ui_files.o: $(UI_GEN) $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(if $(findstring /pic/,$@),$(PIC_FLAGS)) -MMD -MP -c $< -o $@

$(BUILD)/libg4.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/g4tp: $(CLI_OBJS) $(BUILD)/libg4.a
	$(CC) $(LDSAN) -pthread -o $@ $(CLI_OBJS) $(BUILD)/libg4.a $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libg4.a tests/unit/testutil.h $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(MPI_CFLAGS) -Itests/unit -MMD -MP -o $@ $< $(BUILD)/libg4.a $(LDSAN) -lcmocka $(LIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libg4.a $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(MPI_CFLAGS) -MMD -MP -o $@ $< $(BUILD)/libg4.a $(LDSAN) $(LIBS)

test-bins: $(BUILD)/g4tp $(TEST_BINS)
bench-bins: $(BUILD)/g4tp $(BENCH_BINS)

# The whole suite: both flavours, every unit and end-to-end test, one summary line at the end.
check:
	./tests/run_all.sh

clean:
	rm -rf build build-san

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(TEST_BINS:=.d) $(BENCH_BINS:=.d)

# ---- install ------------------------------------------------------------------------------
# `make install PREFIX=/usr/local DESTDIR=...`: the g4tp binary, libg4.a and libg4.so (with a
# soname), the public headers under include/g4tp/, g4.pc for pkg-config, and the demo model in
# share/g4tp/models/demo, where an installed g4tp looks for it (cli_default_model). The shared
# library is built from -fPIC objects of their own ($(BUILD)/pic/), so the normal objects stay;
# they are compiled with -fvisibility=hidden: it exports only what the public headers declare
# (G4_API_BEGIN .. G4_API_END), which tests/e2e/install.sh checks with nm -D.
VERSION    := 0.1.0
SOVERSION  := 0
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR    ?= $(PREFIX)/share/g4tp
PIC_OBJS   := $(LIB_SRCS:%.c=$(BUILD)/pic/%.o)
SONAME     := libg4.so.$(SOVERSION)
DEMO_FILES := $(wildcard models/demo/*)

.PHONY: shared install install-bin uninstall
isa_flags = $(if $(findstring _avx512.,$(1)),$(AVX512_FLAGS),$(if $(findstring _avx2.,$(1)),$(AVX2_FLAGS)))
$(PIC_OBJS): $(BUILD)/pic/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(MPI_CFLAGS) $(call isa_flags,$<) $(PIC_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libg4.so.$(VERSION): $(PIC_OBJS) $(BUILD)/pic/gen/ui_files.o
	$(CC) -shared $(LDSAN) -pthread -Wl,-soname,$(SONAME) -o $@ $^ $(LIBS)

shared: $(BUILD)/libg4.so.$(VERSION)

# the command and its demo model only (what the container image needs)
install-bin: $(BUILD)/g4tp
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(DATADIR)/models/demo
	install -m 755 $(BUILD)/g4tp $(DESTDIR)$(BINDIR)/g4tp
	install -m 644 $(DEMO_FILES) $(DESTDIR)$(DATADIR)/models/demo/

# g4.pc is written at install time: it holds PREFIX, which may differ from one install to the next
install: install-bin $(BUILD)/libg4.a $(BUILD)/libg4.so.$(VERSION)
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)/g4tp/base
	install -m 644 $(BUILD)/libg4.a $(DESTDIR)$(LIBDIR)/libg4.a
	install -m 755 $(BUILD)/libg4.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libg4.so.$(VERSION)
	ln -sf libg4.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libg4.so
	install -m 644 include/g4.h $(DESTDIR)$(INCLUDEDIR)/g4tp/g4.h
	install -m 644 src/base/error.h $(DESTDIR)$(INCLUDEDIR)/g4tp/base/error.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS@|$(LIBS)|' packaging/g4.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/g4.pc
	chmod 644 $(DESTDIR)$(LIBDIR)/pkgconfig/g4.pc

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/g4tp $(DESTDIR)$(LIBDIR)/libg4.a $(DESTDIR)$(LIBDIR)/libg4.so.$(VERSION) \
	      $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libg4.so $(DESTDIR)$(LIBDIR)/pkgconfig/g4.pc \
	      $(DESTDIR)$(INCLUDEDIR)/g4tp/g4.h $(DESTDIR)$(INCLUDEDIR)/g4tp/base/error.h
	rm -f $(addprefix $(DESTDIR)$(DATADIR)/models/demo/,$(notdir $(DEMO_FILES)))
	-rmdir $(DESTDIR)$(INCLUDEDIR)/g4tp/base $(DESTDIR)$(INCLUDEDIR)/g4tp $(DESTDIR)$(DATADIR)/models/demo \
	       $(DESTDIR)$(DATADIR)/models $(DESTDIR)$(DATADIR) 2>/dev/null

-include $(PIC_OBJS:.o=.d) $(BUILD)/pic/gen/ui_files.d

# Fuzzing (libFuzzer harnesses in fuzz/, docs/fuzzing.md): make fuzz-bins, make fuzz, make fuzz-NAME.
include fuzz/fuzz.mk

# The container image, built and run for real (opt-in: needs docker or podman; docs/deploy.md).
.PHONY: check-image
check-image:
	packaging/check-image.sh
