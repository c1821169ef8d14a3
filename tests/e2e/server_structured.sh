# Structured output end to end (tests/node/server_structured.mjs): response_format, /generate
# json_schema and tool_choice on the demo model, every answer validated by ajv, streamed tool
# calls reassembled, and the 400s naming their field. Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
command -v node >/dev/null || { bad "node is missing (scripts/install-deps.sh)"; finish; exit 1; }
[ -f tests/node/node_modules/ajv/package.json ] || { bad "the ajv package is missing: (cd tests/node && npm ci)"; finish; exit 1; }
srv_start || { bad "server starts"; finish; exit 1; }
if G4TP_URL=$URL timeout $((600*SLOW)) node --test tests/node/server_structured.mjs > "$SRV_TMP/node.log" 2>&1; then
  ok "structured output tests ($(grep -c '^ok ' "$SRV_TMP/node.log") passed)"
else
  bad "structured output tests"; cat "$SRV_TMP/node.log"
fi
srv_stop
expect_eq "$SRV_RC" 0 "server exits cleanly"
finish
