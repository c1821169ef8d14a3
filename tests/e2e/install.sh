# make install into a temporary DESTDIR: the files land where they should, the shared library has
# its soname, a tiny program builds against the installed library through pkg-config (shared and
# static) and runs the installed demo model, the installed g4tp finds that demo model by itself,
# and make uninstall removes everything again.
. tests/e2e/_lib.sh
# the sanitizer flavour would only rebuild the same objects with other flags
[ "${G4_SAN:-0}" = 1 ] && { echo "skipped under the sanitizer build (same install as the normal one)"; exit 77; }
command -v pkg-config >/dev/null || { echo "pkg-config missing (scripts/install-deps.sh installs it)"; exit 1; }
BUILD=${G4_BUILD:-build}; BUILD=${BUILD#"$PWD"/}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
D=$tmp/dest; P=/usr/local
if ! make -s -j2 BUILD="$BUILD" install PREFIX=$P DESTDIR="$D" >"$tmp/make.log" 2>&1; then
  bad "make install failed"; tail -20 "$tmp/make.log"; finish; exit 1
fi
for f in bin/g4tp lib/libg4.a lib/libg4.so.0 lib/libg4.so lib/pkgconfig/g4.pc include/g4tp/g4.h \
         include/g4tp/base/error.h share/g4tp/models/demo/config.json share/g4tp/models/demo/model.safetensors; do
  [ -e "$D$P/$f" ] && ok "installed $f" || bad "missing $P/$f"
done
soname=$(readelf -d "$D$P/lib/libg4.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
expect_eq "$soname" "libg4.so.0" "libg4.so has the soname libg4.so.0"
nm -D --undefined-only "$D$P/lib/libg4.so" | grep -q ' g4_engine_open$' && bad "g4_engine_open undefined in libg4.so" || ok "libg4.so defines the API"
# a clean public face: every symbol libg4.so exports is a g4_ name the installed headers declare
# (the objects are built with -fvisibility=hidden; the headers' G4_API_BEGIN/END export the API)
api=$(cat "$D$P/include/g4tp/g4.h" "$D$P/include/g4tp/base/error.h" | grep -o '\bg4_[a-z0-9_]*[[:space:]]*(' | tr -d ' (' | sort -u)
exported=$(nm -D --defined-only "$D$P/lib/libg4.so" | awk 'NF == 3 && $2 != "A" {print $3}' | sort -u)
stray=$(comm -23 <(echo "$exported") <(echo "$api") | head -20)
[ -n "$exported" ] && [ -z "$stray" ] && ok "libg4.so exports only the API of include/ ($(echo "$exported" | wc -l) symbols)" \
  || bad "libg4.so exports symbols outside include/'s API: $(echo $stray)"

# a program of a library user: the include and link flags come only from pkg-config
cat >"$tmp/hello.c" <<'EOF'
#include <g4.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    g4_engine_opts o = {0};
    o.model_dir = argv[1];
    o.threads = 1;
    o.max_ctx = 64;
    g4_engine *e;
    g4_err err = {0};
    if (g4_engine_open(&o, &e, &err)) { fprintf(stderr, "hello: %s\n", err.msg); return 1; }
    int seq;
    if (g4_engine_seq_open(e, 8, &seq, &err)) { fprintf(stderr, "hello: %s\n", err.msg); return 1; }
    float *logits = malloc(sizeof(float) * (size_t)g4_engine_vocab(e));
    int32_t id = 2, pos = 0;
    uint8_t want = 1;
    g4_batch b = {.n = 1, .ids = &id, .pos = &pos, .seq = &seq, .logits = &want};
    if (g4_engine_forward(e, &b, logits, &err)) { fprintf(stderr, "hello: %s\n", err.msg); return 1; }
    int best = 0;
    for (int i = 1; i < (int)g4_engine_vocab(e); i++) if (logits[i] > logits[best]) best = i;
    printf("vocab %lld tp %d next %d\n", (long long)g4_engine_vocab(e), g4_engine_tp(e), best);
    free(logits);
    g4_engine_seq_close(e, seq);
    g4_engine_close(e);
    return 0;
}
EOF
pc() { PKG_CONFIG_PATH="$D$P/lib/pkgconfig" pkg-config --define-variable=prefix="$D$P" \
         --define-variable=libdir="$D$P/lib" --define-variable=includedir="$D$P/include" "$@" g4; }
expect_eq "$(PKG_CONFIG_PATH="$D$P/lib/pkgconfig" pkg-config --modversion g4)" "0.1.0" "pkg-config knows g4"
expect_eq "$(PKG_CONFIG_PATH="$D$P/lib/pkgconfig" pkg-config --variable=prefix g4)" "$P" "g4.pc names PREFIX"
demo=$D$P/share/g4tp/models/demo
if cc -std=c11 -o "$tmp/hello" "$tmp/hello.c" $(pc --cflags --libs) 2>"$tmp/cc.log"; then
  out=$(LD_LIBRARY_PATH="$D$P/lib" "$tmp/hello" "$demo" 2>&1)
  LD_LIBRARY_PATH="$D$P/lib" ldd "$tmp/hello" | grep -q 'libg4.so.0 => '"$D$P" && ok "hello links the installed libg4.so.0" || bad "hello: $(ldd "$tmp/hello" | grep g4)"
  [[ "$out" == "vocab "*" tp 1 next "* ]] && ok "hello (shared) runs the installed demo: $out" || bad "hello (shared): $out"
else bad "building against the shared library: $(cat "$tmp/cc.log")"; fi
if cc -std=c11 -static-libgcc -o "$tmp/hello_static" "$tmp/hello.c" $(pc --cflags) "$D$P/lib/libg4.a" \
      $(pc --static --libs-only-L) $(pc --static --libs | sed 's/-lg4//') 2>"$tmp/cc.log"; then
  out2=$("$tmp/hello_static" "$demo" 2>&1)
  expect_eq "$out2" "$out" "hello (static libg4.a) gives the same"
else bad "building against the static library: $(cat "$tmp/cc.log")"; fi

# the installed binary finds the installed demo model without --model or G4_DEMO_MODEL (run outside
# the repository, whose models/demo is the relative fallback)
ans=$(cd "$tmp" && env -u G4_DEMO_MODEL "$D$P/bin/g4tp" run -p "What is the capital of France?" --temperature 0 2>"$tmp/run.err")
expect_eq "$ans" "The capital of France is Paris." "installed g4tp answers from share/g4tp/models/demo"

make -s BUILD="$BUILD" uninstall PREFIX=$P DESTDIR="$D" >"$tmp/make.log" 2>&1 || bad "make uninstall failed: $(tail -5 "$tmp/make.log")"
left=$(find "$D" -mindepth 1 \( -type f -o -type l \) | sed "s|^$D||")
expect_eq "$left" "" "make uninstall removes every installed file"
finish
