#!/usr/bin/env bash
# Runs the whole g4tp test suite: builds the normal and the ASan+UBSan flavours, runs every
# unit test binary (cmocka) and every end-to-end script in tests/e2e under both, and ends with
# one line "N passed, N failed" for CI. Exit status is non-zero when anything failed.
#   FLAVOURS="build" tests/run_all.sh      only the normal build
#   ONLY=tokenizer tests/run_all.sh        only tests whose name contains the word
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
FLAVOURS=${FLAVOURS:-"build build-san"}
ONLY=${ONLY:-}
pass=0; fail=0; skip=0; failed_names=()
LOGDIR=$ROOT/build-logs; mkdir -p "$LOGDIR"

record() { # name status(0 pass, 77 skip, else fail)
  case "$2" in
    0) pass=$((pass+1)); echo "PASS $1";;
    77) skip=$((skip+1)); echo "SKIP $1";;
    *) fail=$((fail+1)); failed_names+=("$1"); echo "FAIL $1 (log: ${3:-})";;
  esac
}

for flavour in $FLAVOURS; do
  san=0; [ "$flavour" = build-san ] && san=1
  echo "== building $flavour"
  if ! make -s -j"$JOBS" BUILD="$flavour" SAN=$san test-bins >"$LOGDIR/make-$flavour.log" 2>&1; then
    cat "$LOGDIR/make-$flavour.log" | tail -40
    record "build:$flavour" 1 "$LOGDIR/make-$flavour.log"
    continue
  fi
  export G4TP="$ROOT/$flavour/g4tp" G4_BUILD="$ROOT/$flavour" G4_SAN=$san G4_ROOT="$ROOT"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
  for bin in "$flavour"/tests/test_*; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    [ -n "$ONLY" ] && [[ "$name" != *"$ONLY"* ]] && continue
    log="$LOGDIR/$flavour-$name.log"
    (cd "$ROOT" && timeout 1200 "$bin") >"$log" 2>&1; rc=$?
    ok=$(grep -c '^\[       OK \]' "$log"); bad=$(grep -cE '^\[  (FAILED|  ERROR)  \] [^0-9]' "$log")
    bad2=$(grep -cE '^\[  FAILED  \] [a-zA-Z_]' "$log")
    [ "$bad2" -gt "$bad" ] && bad=$bad2
    pass=$((pass+ok)); fail=$((fail+bad))
    if [ "$bad" -gt 0 ]; then failed_names+=("$flavour/$name"); grep -B5 -E '^\[  FAILED  \] [a-zA-Z_]' "$log" | head -40; fi
    if [ $rc -ne 0 ] && [ "$bad" -eq 0 ]; then record "$flavour/$name (crashed, rc=$rc)" 1 "$log"; tail -30 "$log"; fi
    echo "$flavour/$name: $ok passed, $bad failed"
  done
  for t in tests/e2e/*.sh; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .sh)
    case $name in _*) continue;; esac  # helpers sourced by the tests
    [ -n "$ONLY" ] && [[ "$name" != *"$ONLY"* ]] && continue
    log="$LOGDIR/$flavour-$name.log"
    (cd "$ROOT" && timeout 1800 bash "$t") >"$log" 2>&1; rc=$?
    record "$flavour/$name" $rc "$log"
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && tail -30 "$log"
  done
done

echo
if [ ${#failed_names[@]} -gt 0 ]; then echo "failed: ${failed_names[*]}"; fi
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
