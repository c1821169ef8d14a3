# Fuzzing (docs/fuzzing.md), included at the end of the Makefile. The harnesses fuzz/fuzz_*.c
# are built with clang's libFuzzer: the parsers' sources with -fsanitize=fuzzer-no-link,
# address,undefined into $(FUZZ_BUILD)/obj, each harness linked with -fsanitize=fuzzer,...
#   make fuzz-bins                  build every harness into $(FUZZ_BUILD)/
#   make fuzz [FUZZ_TIME=600]       run each harness FUZZ_TIME seconds (one after the other, 1 job)
#   make fuzz-NAME [FUZZ_TIME=...]  run one (NAME as in fuzz/fuzz_NAME.c)
# Runs start from the seeds in fuzz/corpus/NAME and keep what they find in
# $(FUZZ_BUILD)/corpus/NAME; crashes land in $(FUZZ_BUILD)/crashes/. No MPI (the parsers need none).

FUZZ_CC    ?= clang
FUZZ_BUILD ?= build-fuzz
FUZZ_TIME  ?= 60
FUZZ_ARGS  ?=
# libFuzzer's per-input limits; the grammar compilers get tight ones, so that an input whose
# compile is slow or big fails like a crash (docs/fuzzing.md). `make fuzz-limits-NAME` prints them.
FUZZ_LIMITS             := -timeout=30 -rss_limit_mb=4096
FUZZ_LIMITS_json_schema := -timeout=10 -rss_limit_mb=1024
FUZZ_LIMITS_regex       := -timeout=10 -rss_limit_mb=1024
fuzz_limits = $(or $(FUZZ_LIMITS_$(1)),$(FUZZ_LIMITS))

FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -g -O1 -pthread -Iinclude -Isrc \
               -fno-strict-aliasing $(FUZZ_SAN) -DG4_FUZZ_ROOT='"$(CURDIR)"'
# The parsers and what they call (not the whole library: the kernels and the forward pass take
# minutes under clang's instrumentation and no parser reaches them); the linker takes only what
# the harnesses use.
# (kernels_dispatch.c is left out too: clang 14 does not know all of its cpu feature names).
FUZZ_LIB_SRCS := $(wildcard src/base/*.c src/model/*.c src/text/*.c) \
                 $(filter-out %_avx2.c %_avx512.c src/kernels/kernels_dispatch.c,$(wildcard src/kernels/*.c)) \
                 src/engine/gen_config.c src/engine/sampler.c src/engine/logprobs.c $(wildcard src/server/*.c) \
                 $(wildcard src/grammar/*.c) $(wildcard src/image/*.c)
FUZZ_LIB_OBJS := $(FUZZ_LIB_SRCS:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_NAMES    := $(patsubst fuzz/fuzz_%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_BINS     := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz_%)

.PHONY: fuzz fuzz-bins fuzz-clean $(FUZZ_NAMES:%=fuzz-%) $(FUZZ_NAMES:%=fuzz-limits-%)

$(FUZZ_BUILD)/obj/%.o: %.c fuzz/fuzz.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/libg4fuzz.a: $(FUZZ_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.c $(FUZZ_BUILD)/libg4fuzz.a fuzz/fuzz.mk
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Ifuzz -fsanitize=fuzzer -MMD -MP -o $@ $< $(FUZZ_BUILD)/libg4fuzz.a -ljansson -lxxhash \
	    -lpng -ljpeg -lwebpdemux -lwebp -lm

fuzz-bins: $(FUZZ_BINS)

$(FUZZ_NAMES:%=fuzz-%): fuzz-%: $(FUZZ_BUILD)/fuzz_%
	@mkdir -p $(FUZZ_BUILD)/corpus/$* $(FUZZ_BUILD)/crashes
	$(FUZZ_BUILD)/fuzz_$* -max_total_time=$(FUZZ_TIME) $(call fuzz_limits,$*) -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_BUILD)/crashes/$*- $(FUZZ_ARGS) $(FUZZ_BUILD)/corpus/$* fuzz/corpus/$*

$(FUZZ_NAMES:%=fuzz-limits-%): fuzz-limits-%:
	@echo $(call fuzz_limits,$*)

fuzz: fuzz-bins
	@for n in $(FUZZ_NAMES); do $(MAKE) --no-print-directory fuzz-$$n || exit 1; done

fuzz-clean:
	rm -rf $(FUZZ_BUILD)

-include $(FUZZ_LIB_OBJS:.o=.d) $(FUZZ_BINS:=.d)
