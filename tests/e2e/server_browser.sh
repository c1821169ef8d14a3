#!/usr/bin/env bash
# What a web page in a browser can make g4tp serve do (docs/server.md, "Browsers"), with curl
# playing the browser: on a loopback address a foreign Host name (DNS rebinding) is refused
# unless --allowed-hosts names it; an API body that is not JSON (text/plain, a form, none) runs
# nothing (415); without --cors no answer carries CORS headers and preflights are refused; with
# --cors the listed origins get preflights and Access-Control-Allow-Origin on every answer
# (errors and streams too), other origins nothing; "*" only when asked; the same-origin case
# (the coming page at /) needs none of it. Beyond loopback any Host is served unless told.
set -u
cd "$(dirname "$0")/../.."
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
CHAT='{"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0,"max_tokens":8}'
# req ARGS...: curl with the headers kept; sets CODE, HDRS (lowercased names), BODY
req() {
  local out; out=$(curl -s -D "$SRV_TMP/h" -w '\n%{http_code}' --max-time $((60 * SLOW)) "$@")
  CODE=${out##*$'\n'}; BODY=${out%$'\n'*}; HDRS=$(tr -d '\r' < "$SRV_TMP/h" | sed 's/^\([^:]*\):/\L\1:/')
}
has() { printf '%s\n' "$HDRS" | grep -qi "^$1"; }
generated() { metric g4tp_generation_tokens_total; }

srv_start || { bad "server starts"; finish; exit 1; }
PORT=${URL##*:}

# ---- Host: DNS rebinding ----
req -H 'Host: evil.example' "$URL/v1/models"
expect_error 403 host_not_allowed "a foreign Host is refused (403 host_not_allowed)"
g0=$(generated)
req -H "Host: evil.example:$PORT" -H 'Content-Type: application/json' -d "$CHAT" "$URL/v1/chat/completions"
[ "$CODE" = 403 ] && [ "$(generated)" = "$g0" ] && ok "a rebound page's chat request runs nothing" || bad "forged Host chat: $CODE $BODY"
req -H 'Host: evil.example' "$URL/health"
expect_eq "$CODE" 403 "the Host check covers every route (/health)"
for h in "localhost:$PORT" "127.0.0.1:$PORT" "[::1]:$PORT" "LocalHost"; do
  req -H "Host: $h" "$URL/v1/models"
  expect_eq "$CODE" 200 "Host $h is served"
done

# ---- JSON bodies only: a form or text/plain POST runs nothing ----
g0=$(generated)
req -H 'Content-Type: text/plain' -d "$CHAT" "$URL/v1/chat/completions"
expect_error 415 unsupported_media_type "text/plain body -> 415"
req -d "$CHAT" "$URL/v1/chat/completions"  # curl's default: a form
expect_error 415 unsupported_media_type "form-encoded body -> 415"
req -H 'Content-Type: multipart/form-data; boundary=x' -d "$CHAT" "$URL/generate"
expect_error 415 unsupported_media_type "multipart body on /generate -> 415"
req -H 'Content-Type:' -d "$CHAT" "$URL/v1/completions"
expect_error 415 unsupported_media_type "no Content-Type -> 415"
req -H 'Content-Type: text/plain' -d '{"prompt":"hi"}' "$URL/tokenize"
expect_error 415 unsupported_media_type "/tokenize takes JSON only too"
req -H 'Content-Type: text/plain' -d '{}' "$URL/v1/messages"
[ "$CODE" = 415 ] && pyck "d['type']=='error' and d['error']['type']=='invalid_request_error'" && ok "/v1/messages: 415 in Anthropic's shape" \
  || bad "/v1/messages 415: $CODE $BODY"
expect_eq "$(generated)" "$g0" "none of them generated a token"
req -H 'Content-Type: application/json; charset=utf-8' -d "$CHAT" "$URL/v1/chat/completions"
expect_eq "$CODE" 200 "application/json; charset=utf-8 is JSON"

# ---- no --cors: no CORS headers, preflights refused ----
req -H 'Origin: http://evil.example' -H 'Content-Type: application/json' -d "$CHAT" "$URL/v1/chat/completions"
[ "$CODE" = 200 ] && ! has access-control- && ok "no --cors: an answer carries no CORS header (browsers keep it from the page)" || bad "no --cors: $HDRS"
req -X OPTIONS -H 'Origin: http://evil.example' -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: content-type' "$URL/v1/chat/completions"
[ "$CODE" = 403 ] && ! has access-control- && ok "no --cors: a preflight is refused (403, no CORS header)" || bad "no --cors preflight: $CODE $HDRS"
req -X OPTIONS "$URL/v1/chat/completions"
[ "$CODE" = 204 ] && has 'allow: POST, OPTIONS' && ok "a plain OPTIONS says what the route takes" || bad "OPTIONS: $CODE $HDRS"
# same origin (the page at / calling its own server): a browser needs no CORS header for it
req -H "Origin: http://127.0.0.1:$PORT" -H 'Content-Type: application/json' -d "$CHAT" "$URL/v1/chat/completions"
expect_eq "$CODE" 200 "a same-origin request is served"
srv_stop

# ---- --cors ORIGINS ----
APP=http://app.example:3000
srv_start --cors "$APP,https://other.example" --api-key sekrit || { bad "server with --cors starts"; finish; exit 1; }
req -X OPTIONS -H "Origin: $APP" -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: content-type,authorization,x-stainless-os' \
  "$URL/v1/chat/completions"
[ "$CODE" = 204 ] && has "access-control-allow-origin: $APP$" && has 'access-control-allow-methods: POST, OPTIONS' \
  && has 'access-control-allow-headers: content-type,authorization,x-stainless-os' && has 'vary: Origin' && has 'access-control-max-age: ' \
  && ok "preflight from a listed origin: 204, its origin, methods, the headers it asked for (no key needed)" || bad "preflight: $CODE $HDRS"
req -H "Origin: $APP" -H 'Authorization: Bearer sekrit' -H 'Content-Type: application/json' -d "$CHAT" "$URL/v1/chat/completions"
[ "$CODE" = 200 ] && has "access-control-allow-origin: $APP$" && has 'vary: Origin' && ok "the answer echoes the listed origin" || bad "answer: $CODE $HDRS"
req -H "Origin: $APP" -H 'Content-Type: application/json' -d "$CHAT" "$URL/v1/chat/completions"
[ "$CODE" = 401 ] && has "access-control-allow-origin: $APP$" && ok "errors carry it too (the page can read the 401)" || bad "401: $CODE $HDRS"
req -N -H "Origin: $APP" -H 'Authorization: Bearer sekrit' -H 'Content-Type: application/json' -d "${CHAT%\}},\"stream\":true}" "$URL/v1/chat/completions"
[ "$CODE" = 200 ] && has "access-control-allow-origin: $APP$" && printf '%s' "$BODY" | grep -q 'data: \[DONE\]' && ok "streams carry it" || bad "stream: $CODE $HDRS"
req -H 'Origin: https://OTHER.example' -H 'Authorization: Bearer sekrit' "$URL/v1/models"
has 'access-control-allow-origin: https://OTHER.example$' && ok "a second listed origin (case-insensitive)" || bad "second origin: $HDRS"
req -H 'Origin: http://evil.example' -H 'Authorization: Bearer sekrit' -H 'Content-Type: application/json' -d "$CHAT" "$URL/v1/chat/completions"
! has access-control- && ok "an origin not in the list gets no CORS header" || bad "unlisted origin: $HDRS"
req -X OPTIONS -H 'Origin: http://evil.example' -H 'Access-Control-Request-Method: POST' "$URL/v1/chat/completions"
expect_error 403 origin_not_allowed "preflight from an origin not in the list -> 403"
! has access-control- && ok "... with no CORS header" || bad "unlisted preflight: $HDRS"
req -X OPTIONS -H "Origin: $APP" -H 'Access-Control-Request-Method: GET' "$URL/v1/models/g4tp-demo"
[ "$CODE" = 204 ] && has 'access-control-allow-methods: GET, HEAD, OPTIONS' && ok "preflight of a GET route" || bad "GET preflight: $CODE $HDRS"
srv_stop

# ---- --cors '*' only when asked; --allowed-hosts; beyond loopback ----
srv_start --cors '*' --allowed-hosts 'llm.internal,Box.Lan' || { bad "server with --cors * starts"; finish; exit 1; }
req -H 'Origin: http://anything.example' "$URL/v1/models"
has 'access-control-allow-origin: \*$' && ! has vary: && ok "--cors '*': Access-Control-Allow-Origin: *" || bad "--cors *: $HDRS"
req -H 'Host: llm.internal:8080' "$URL/v1/models"
expect_eq "$CODE" 200 "--allowed-hosts: a listed name is served"
req -H 'Host: box.lan' "$URL/v1/models"
expect_eq "$CODE" 200 "--allowed-hosts: names compare case-insensitively"
req -H 'Host: evil.example' "$URL/v1/models"
expect_eq "$CODE" 403 "--allowed-hosts: others still refused"
srv_stop
srv_start --allowed-hosts '*' || { bad "server with --allowed-hosts * starts"; finish; exit 1; }
req -H 'Host: evil.example' "$URL/v1/models"
expect_eq "$CODE" 200 "--allowed-hosts '*': any Host"
srv_stop
srv_start --host 0.0.0.0 --api-key sekrit || { bad "server on 0.0.0.0 starts"; finish; exit 1; }
req -H 'Host: gpu-box.example' -H 'Authorization: Bearer sekrit' "$URL/v1/models"
expect_eq "$CODE" 200 "bound beyond loopback: any Host (the API key guards it)"
srv_stop

# ---- bad lists are refused at start ----
for a in "--cors null" "--cors app.example" "--cors http://a.example/x" "--allowed-hosts a/b"; do
  # shellcheck disable=SC2086
  out=$(timeout $((60 * SLOW)) "$G4TP" serve --port 0 $a 2>&1); rc=$?
  [ $rc -ne 0 ] && echo "$out" | grep -q -- "${a%% *}" && ok "serve $a: refused ($rc)" || bad "serve $a: rc $rc: $out"
done
finish
