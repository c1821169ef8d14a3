#!/usr/bin/env bash
# Fuzz smoke test (docs/fuzzing.md): builds the libFuzzer harnesses fuzz/fuzz_*.c with clang into
# build-fuzz/ and runs each one a few seconds from its seed corpus (every seed first, so the seeds
# are regression inputs too), with a fixed seed. Any crash, sanitizer report, leak or broken
# invariant fails it. Runs once: the sanitizer flavour skips it (the fuzzers carry ASan+UBSan
# themselves). Skipped when clang or its libFuzzer is missing (scripts/install-deps.sh installs both).
#   FUZZ_SMOKE_TIME=S   seconds per harness (default 2)
set -u
cd "$(dirname "$0")/../.."
. tests/e2e/_lib.sh
if [ "${G4_SAN:-0}" = 1 ]; then echo "skip: run in the normal flavour only (the fuzzers have their own sanitizers)"; exit 77; fi
FUZZ_CC=${FUZZ_CC:-clang}
command -v "$FUZZ_CC" >/dev/null || { echo "skip: $FUZZ_CC not installed"; exit 77; }
tmp=$(mktemp -d /tmp/g4fuzz-smoke.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' >"$tmp/probe.c"
if ! "$FUZZ_CC" -fsanitize=fuzzer,address,undefined "$tmp/probe.c" -o "$tmp/probe" 2>"$tmp/probe.log"; then
  cat "$tmp/probe.log"; echo "skip: $FUZZ_CC has no libFuzzer (Debian: libclang-rt-14-dev)"; exit 77
fi
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
secs=${FUZZ_SMOKE_TIME:-2}
if ! make -s -j"$(nproc 2>/dev/null || echo 2)" FUZZ_CC="$FUZZ_CC" FUZZ_BUILD="$FUZZ_BUILD" fuzz-bins >"$tmp/make.log" 2>&1; then
  tail -40 "$tmp/make.log"; bad "building the fuzz harnesses"; finish; exit
fi
ok "built the fuzz harnesses"
for src in fuzz/fuzz_*.c; do
  name=$(basename "$src" .c); name=${name#fuzz_}
  mkdir -p "$tmp/new-$name" "$tmp/crash"
  # new inputs go to the first (temporary) folder; the seeds are only read; the per-input time
  # and memory limits are fuzz.mk's (tight for the grammar compilers)
  limits=$(make -s --no-print-directory "fuzz-limits-$name")
  # shellcheck disable=SC2086
  "$FUZZ_BUILD/fuzz_$name" -seed=1 -max_total_time="$secs" $limits \
    -artifact_prefix="$tmp/crash/$name-" "$tmp/new-$name" "fuzz/corpus/$name" >"$tmp/$name.log" 2>&1
  rc=$?
  runs=$(grep -o '^Done [0-9]* runs' "$tmp/$name.log" | grep -o '[0-9]*')
  if [ $rc -eq 0 ] && [ -n "$runs" ]; then
    ok "fuzz_$name: $runs runs clean"
  else
    grep -E 'invariant|ERROR|runtime error|SUMMARY|^    #[0-9] ' "$tmp/$name.log" | head -25
    mkdir -p "$FUZZ_BUILD/crashes"
    for f in "$tmp/crash/$name-"*; do
      [ -f "$f" ] || continue
      cp "$f" "$FUZZ_BUILD/crashes/"
      echo "input, kept as $FUZZ_BUILD/crashes/$(basename "$f") (rerun: $FUZZ_BUILD/fuzz_$name THAT_FILE):"
      head -c 400 "$f" | od -c | head -16
    done
    bad "fuzz_$name (rc $rc)"
  fi
done
finish
