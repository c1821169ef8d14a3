# The official OpenAI SDK for Node (npm `openai`, tests/node) against g4tp serve on the demo
# model, with an API key: node --test tests/node/server_openai.mjs. Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
command -v node >/dev/null || { bad "node is missing (scripts/install-deps.sh)"; finish; exit 1; }
[ -f tests/node/node_modules/openai/package.json ] || { bad "the openai package is missing: (cd tests/node && npm ci)"; finish; exit 1; }
KEY=test-key-$$
API_KEY=$KEY srv_start || { bad "server starts"; finish; exit 1; }
node_tests tests/node/server_openai.mjs "OpenAI SDK tests"
srv_stop
expect_eq "$SRV_RC" 0 "server exits cleanly"
finish
