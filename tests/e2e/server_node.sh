# The official OpenAI SDK for Node (npm `openai`, tests/node) against g4tp serve on the demo
# model, with an API key: node --test tests/node/server_openai.mjs. Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
command -v node >/dev/null || { bad "node is missing (scripts/install-deps.sh)"; finish; exit 1; }
[ -f tests/node/node_modules/openai/package.json ] || { bad "the openai package is missing: (cd tests/node && npm ci)"; finish; exit 1; }
KEY=test-key-$$
API_KEY=$KEY srv_start || { bad "server starts"; finish; exit 1; }
if G4TP_URL=$URL G4TP_KEY=$KEY timeout $((300*SLOW)) node --test tests/node/server_openai.mjs > "$SRV_TMP/node.log" 2>&1; then
  ok "OpenAI SDK tests ($(grep -c '^ok ' "$SRV_TMP/node.log") passed)"
else
  bad "OpenAI SDK tests"; cat "$SRV_TMP/node.log"
fi
srv_stop
expect_eq "$SRV_RC" 0 "server exits cleanly"
finish
