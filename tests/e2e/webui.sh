# The chat page at `/` (docs/server.md, "Chat page"): its files and headers with curl, then the
# page itself in Debian's headless chromium driven by playwright-core (tests/node/webui.mjs):
# the Paris question on the demo model, history and reload, thinking, safe rendering, errors,
# an image upload answered by a model with a vision tower, the API key, and Stop on a long answer of a random-weight model (the server
# cancels it). Screenshots go to build-logs/ (or $G4_SHOT_DIR). Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
command -v node >/dev/null || { bad "node is missing (scripts/install-deps.sh)"; finish; exit 1; }
[ -x /usr/bin/chromium ] || { bad "chromium is missing (scripts/install-deps.sh)"; finish; exit 1; }
[ -f tests/node/node_modules/playwright-core/package.json ] || { bad "playwright-core is missing: (cd tests/node && npm ci)"; finish; exit 1; }

DEMO_PID=; KEYED_PID=
trap 'for p in $DEMO_PID $KEYED_PID; do kill -KILL "$p" 2>/dev/null; done; srv_cleanup' EXIT
# the demo's text weights with a tiny vision tower (tests/data/vision/demo_vision): the same
# answers as the demo, and an uploaded picture is seen (its tokens counted) rather than refused
srv_start --model tests/data/vision/demo_vision --model-name g4tp-demo || { bad "server starts"; finish; exit 1; }
DEMO_URL=$URL; DEMO_PID=$SRV_PID

# ---- the files, with curl ----------------------------------------------------------------------
hdrs=$SRV_TMP/h; body=$SRV_TMP/b
code=$(curl -s -D "$hdrs" -o "$body" -w '%{http_code}' "$URL/")
expect_eq "$code" 200 "GET / answers"
grep -qi '^content-type: text/html; charset=utf-8' "$hdrs" && ok "/ is text/html" || bad "/ content type: $(cat "$hdrs")"
grep -qi "^content-security-policy: default-src 'none'; script-src 'self'; style-src 'self';" "$hdrs" && ok "/ has the CSP" || bad "/ CSP: $(cat "$hdrs")"
grep -qi '^x-content-type-options: nosniff' "$hdrs" && ok "/ has nosniff" || bad "/ nosniff"
grep -qi '^cache-control: no-cache' "$hdrs" && ok "/ is revalidated (no-cache)" || bad "/ cache-control"
cmp -s "$body" src/server/ui/index.html && ok "/ is index.html" || bad "/ is not index.html"
grep -q '<script>\|<style\| style=\| on[a-z]*=' src/server/ui/index.html && bad "index.html has inline script or style" || ok "index.html has no inline script or style"
etag=$(sed -n 's/^[Ee][Tt][Aa][Gg]: *\([^[:space:]]*\).*/\1/p' "$hdrs")
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: $etag" "$URL/")" 304 "If-None-Match with the ETag: 304"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: W/$etag, \"x\"" "$URL/")" 304 "a weak ETag in a list: 304"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -H 'If-None-Match: "0000000000000000"' "$URL/")" 200 "another ETag: 200"
for f in app.js:text/javascript app.css:text/css icon.svg:image/svg+xml; do
  n=${f%%:*}; t=${f#*:}
  code=$(curl -s -D "$hdrs" -o "$body" -w '%{http_code}' "$URL/ui/$n")
  if [ "$code" = 200 ] && grep -qi "^content-type: $t" "$hdrs" && cmp -s "$body" "src/server/ui/$n"; then ok "/ui/$n ($t)"; else bad "/ui/$n: $code $(cat "$hdrs")"; fi
done
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -I "$URL/")" 200 "HEAD /"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "$URL/ui/nope.js")" 404 "an unknown file: 404"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' --path-as-is "$URL/ui/../ui/app.js")" 404 "no path walking: 404"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "$URL/ui/")" 404 "/ui/: 404"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -X POST -d x "$URL/")" 405 "POST /: 405"
[ "$(metric 'g4tp_http_requests_total{endpoint="/ui/{file}",code="200"}')" = 3 ] && ok "metrics count /ui/{file}" || bad "metrics for /ui/{file}"

# ---- the second server: a random-weight model (answers go on for long), with an API key ------
make_slow_model || { bad "slow model"; finish; exit 1; }
KEY=webui-key-$$
API_KEY=$KEY srv_start --model "$SLOW_MODEL" || { bad "keyed server starts"; finish; exit 1; }
KEYED_URL=$URL; KEYED_PID=$SRV_PID
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "$URL/")" 200 "the page needs no API key"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/models")" 401 "the API does"

# ---- the page in the browser ----------------------------------------------------------------------
SHOT_DIR=${G4_SHOT_DIR:-build-logs}
mkdir -p "$SHOT_DIR"
if G4TP_URL=$DEMO_URL G4TP_KEY_URL=$KEYED_URL G4TP_KEY=$KEY G4TP_SHOT_DIR=$SHOT_DIR G4TP_SLOW=$SLOW \
   timeout $((600 * SLOW)) node --test tests/node/webui.mjs > "$SRV_TMP/node.log" 2>&1; then
  ok "chat page in chromium ($(grep -c '^ok ' "$SRV_TMP/node.log") passed)"
else
  bad "chat page in chromium"; cat "$SRV_TMP/node.log"
fi
for f in webui-thinking.png webui-stopped.png; do [ -s "$SHOT_DIR/$f" ] && ok "screenshot $SHOT_DIR/$f" || bad "screenshot $f"; done

srv_stop; expect_eq "$SRV_RC" 0 "keyed server exits cleanly"; KEYED_PID=
SRV_PID=$DEMO_PID; srv_stop; expect_eq "$SRV_RC" 0 "demo server exits cleanly"; DEMO_PID=
finish
