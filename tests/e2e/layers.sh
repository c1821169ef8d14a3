# The folder layering of src/ (scripts/check_layers.py declares it once): no file includes a header
# of a higher layer or of a peer folder, no include loop runs through two folders, and no two
# object files call each other in a loop (the built objects of this flavour). The checker itself
# is checked on planted breaches in a copy: a back-arrow include, a peer include, a folder it
# does not know, and a call loop between two objects.
. tests/e2e/_lib.sh
command -v python3 >/dev/null || { bad "python3 missing"; finish; exit 1; }
BUILD=${G4_BUILD:-build}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
out=$(python3 scripts/check_layers.py --objects "$BUILD" 2>&1); rc=$?
[ $rc = 0 ] && ok "the tree keeps its layers and has no loops: $(echo "$out" | tail -1)" || bad "check_layers: $out"

# planted breaches, each in a fresh copy of src/ and include/
plant() { # name file line; prints the checker's output, returns its status
  rm -rf "$tmp/t"; mkdir -p "$tmp/t"; cp -r src include "$tmp/t/"
  mkdir -p "$(dirname "$tmp/t/$2")"; printf '%s\n' "$3" >>"$tmp/t/$2"
  python3 scripts/check_layers.py --root "$tmp/t" 2>&1
}
o=$(plant back src/base/error.c '#include "engine/scheduler.h"'); rc=$?
[ $rc = 1 ] && [[ "$o" == *"src/base/error.c (base, level 0) includes engine/scheduler.h (engine, level 4)"* ]] \
  && ok "a back-arrow (base including engine) is caught, naming both" || bad "back-arrow: rc=$rc $o"
o=$(plant peer src/model/config.c '#include "grammar/fsa.h"'); rc=$?
[ $rc = 1 ] && [[ "$o" == *"src/model/config.c (model, level 2) includes grammar/fsa.h (grammar, level 2)"* ]] \
  && ok "an include between peers (model and grammar) is caught" || bad "peer include: rc=$rc $o"
o=$(plant folder src/newthing/x.c '#include "base/error.h"'); rc=$?
[ $rc = 1 ] && [[ "$o" == *"folder 'newthing', which LAYERS does not name"* ]] \
  && ok "a folder the layering does not name is caught" || bad "unknown folder: rc=$rc $o"

# a call loop between two objects of one folder
mkdir -p "$tmp/b/src/kernels"
printf 'int b_fn(int);\nint a_fn(int x) { return x ? b_fn(x - 1) : 0; }\n' >"$tmp/a.c"
printf 'int a_fn(int);\nint b_fn(int x) { return x ? a_fn(x - 1) : 1; }\nint c_fn(void) { return 2; }\n' >"$tmp/b2.c"
cc -c -o "$tmp/b/src/kernels/a.o" "$tmp/a.c" && cc -c -o "$tmp/b/src/kernels/b.o" "$tmp/b2.c"
o=$(python3 scripts/check_layers.py --objects "$tmp/b" 2>&1); rc=$?
[ $rc = 1 ] && [[ "$o" == *"call loop: src/kernels/a -> src/kernels/b -> src/kernels/a"* ]] \
  && ok "a call loop between two objects is caught" || bad "call loop: rc=$rc $o"
finish
