# Structured output end to end (tests/node/server_structured.mjs): response_format, /generate
# json_schema, vLLM's guided_* fields and tool_choice on the demo model, every answer validated
# by ajv, streamed tool calls reassembled, tool calls cut by max_tokens leaving no markup in any
# API's text, and the 400s naming their field; the schema corpus (tests/node/server_schemas.mjs,
# tests/data/schemas): every answer validated by ajv with formats on; the grammar cache (a hit
# for the same schema, the same answer as without it). Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
command -v node >/dev/null || { bad "node is missing (scripts/install-deps.sh)"; finish; exit 1; }
[ -f tests/node/node_modules/ajv/package.json ] && [ -f tests/node/node_modules/ajv-formats/package.json ] \
  || { bad "the ajv / ajv-formats packages are missing: (cd tests/node && npm ci)"; finish; exit 1; }
srv_start || { bad "server starts"; finish; exit 1; }
if G4TP_URL=$URL timeout $((600*SLOW)) node --test tests/node/server_structured.mjs > "$SRV_TMP/node.log" 2>&1; then
  ok "structured output tests ($(grep -c '^ok ' "$SRV_TMP/node.log") passed)"
else
  bad "structured output tests"; cat "$SRV_TMP/node.log"
fi
if G4TP_URL=$URL timeout $((900*SLOW)) node --test tests/node/server_schemas.mjs > "$SRV_TMP/node2.log" 2>&1; then
  ok "the schema corpus, answers validated by ajv with formats ($(grep -c '^ok ' "$SRV_TMP/node2.log") passed)"
else
  bad "the schema corpus"; cat "$SRV_TMP/node2.log"
fi
# the grammar cache (--grammar-cache): the same schema again is a hit and gives the same answer
# as a server that compiles every request (--grammar-cache 0)
metric() { curl -s "$URL/metrics" | sed -n "s/^$1 //p"; }
REQ='{"messages":[{"role":"user","content":"Describe something."}],"temperature":0,"max_tokens":200,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string","maxLength":8}},"required":["n","s"],"additionalProperties":false}}}}'
h0=$(metric g4tp_grammar_cache_hits_total)
post /v1/chat/completions "$REQ"; A1=$(pyget "d['choices'][0]['message']['content']")
post /v1/chat/completions "$REQ"; A2=$(pyget "d['choices'][0]['message']['content']")
h1=$(metric g4tp_grammar_cache_hits_total)
[ -n "$h0" ] && [ "$h1" -ge $((h0 + 1)) ] && [ "$A1" = "$A2" ] && ok "the same schema again: a cache hit ($h0 -> $h1), the same answer" || bad "grammar cache: hits $h0 -> $h1, $A1 / $A2"
[ "$(metric g4tp_grammar_cache_entries)" -ge 1 ] && ok "cached grammars are counted" || bad "g4tp_grammar_cache_entries: $(metric g4tp_grammar_cache_entries)"
srv_stop
expect_eq "$SRV_RC" 0 "server exits cleanly"
srv_start --grammar-cache 0 || { bad "server starts with --grammar-cache 0"; finish; exit 1; }
post /v1/chat/completions "$REQ"; B1=$(pyget "d['choices'][0]['message']['content']")
post /v1/chat/completions "$REQ"
[ "$B1" = "$A1" ] && [ "$(metric g4tp_grammar_cache_hits_total)" = 0 ] && [ "$(metric g4tp_grammar_cache_misses_total)" = 0 ] \
  && ok "--grammar-cache 0: no cache, the same answer" || bad "--grammar-cache 0: $B1 vs $A1, hits $(metric g4tp_grammar_cache_hits_total)"
srv_stop
expect_eq "$SRV_RC" 0 "server exits cleanly"
"$G4TP" serve --grammar-cache -1 >/dev/null 2>&1; expect_eq "$?" 2 "--grammar-cache -1 is refused"
finish
