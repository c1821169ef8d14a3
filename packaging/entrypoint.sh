#!/bin/sh
# Container entrypoint: `g4tp serve` with the environment of docs/server.md. MODEL_DIR (default
# /models) is served when it holds a model (config.json), else the built-in demo model. Arguments
# are passed on: `docker run IMAGE --tp 2`; a first argument that is another g4tp command runs
# that instead (`docker run IMAGE run -p "Hi"`).
case "${1:-}" in
  run|generate|chat|tokenize|detokenize|render|bench|inspect|shard|synth|help|--help|-h)
    exec /usr/local/bin/g4tp "$@";;
esac
if [ -n "${MODEL_DIR:-}" ] && [ ! -e "$MODEL_DIR/config.json" ]; then
  echo "g4tp-entrypoint: no model in $MODEL_DIR (no config.json): serving the built-in demo model" >&2
  unset MODEL_DIR
fi
exec /usr/local/bin/g4tp serve "$@"
