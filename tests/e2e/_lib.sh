# Shared helpers for the end-to-end scripts (sourced). $G4TP is the binary under test.
set -u
G4TP=${G4TP:-build/g4tp}
fails=0
ok() { echo "ok - $*"; }
bad() { echo "not ok - $*"; fails=$((fails+1)); }
expect_eq() { if [ "$1" = "$2" ]; then ok "$3"; else bad "$3: got '$1', want '$2'"; fi; }
golden_ids() { python3 -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))[sys.argv[2]])))" "$1" "$2"; }
finish() { echo "$fails failure(s)"; [ "$fails" -eq 0 ]; }
