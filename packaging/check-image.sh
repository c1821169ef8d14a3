#!/usr/bin/env bash
# `make check-image` (opt-in, not part of `make check`): builds the container image and runs it
# as a user would. Checks: /health, the Paris answer from /generate with the built-in demo model,
# a mounted model served instead, the process runs as a non-root user, the HEALTHCHECK turns
# healthy, `docker stop` (SIGTERM) ends it cleanly with status 0; the MPI variant answers with 2
# ranks. Prints the build time and the image size (docs/deploy.md records them).
# The engine: a running docker, else dockerd started here (no bridge, no iptables: containers use
# the host's network and the test talks to 127.0.0.1 only), else podman with vfs storage. Base
# images: BASE/RUNTIME_BASE if given, else local ones from packaging/base-images.sh (mmdebstrap).
set -u
cd "$(dirname "$0")/.."
. tests/e2e/_lib.sh
TAG=g4tp:check; PORT=${CHECK_PORT:-18181}; NAME=g4tp-check-$$
tmp=$(mktemp -d /tmp/g4tp-image.XXXXXX)
STARTED_DOCKERD=
cleanup() {
  $E rm -f $NAME $NAME-m >/dev/null 2>&1
  [ -n "$STARTED_DOCKERD" ] && kill "$STARTED_DOCKERD" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

if docker info >/dev/null 2>&1; then E=docker
elif command -v dockerd >/dev/null; then
  dockerd --data-root ${DOCKER_ROOT:-/var/lib/g4tp-docker} --pidfile $tmp/dockerd.pid --bridge=none --iptables=false \
    --ip-forward=false --ip-masq=false >$tmp/dockerd.log 2>&1 &
  STARTED_DOCKERD=$!
  for i in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  if docker info >/dev/null 2>&1; then E=docker; else echo "dockerd did not start: $(tail -5 $tmp/dockerd.log)"; STARTED_DOCKERD=; E=; fi
fi
if [ -z "${E:-}" ]; then
  command -v podman >/dev/null || { echo "neither docker nor podman can run here (apt-get install docker.io or podman)"; exit 1; }
  E="podman --storage-driver vfs"
fi
echo "# engine: $E"
if [ -z "${BASE:-}" ]; then
  packaging/base-images.sh "${E%% *}" >$tmp/base.log 2>&1 || { echo "base images: $(tail -20 $tmp/base.log)"; exit 1; }
  BASE=g4tp-base:build; RUNTIME_BASE=g4tp-base:runtime
fi
ARGS=(--network host --build-arg BASE=$BASE --build-arg RUNTIME_BASE=${RUNTIME_BASE:-debian:bookworm-slim})

t0=$(date +%s.%N)
$E build "${ARGS[@]}" -t $TAG . >$tmp/build.log 2>&1 || { bad "image build"; tail -30 $tmp/build.log; finish; exit 1; }
secs() { printf '%.1f' "$(echo "$(date +%s.%N) - $1" | bc)"; }
build_s=$(secs $t0)
ok "image built in $build_s s"
size=$($E image inspect --format '{{.Size}}' $TAG)
echo "# image size: $((size / 1000000)) MB ($size bytes)"

health() { curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://127.0.0.1:$PORT/health; }
wait_health() { local i; for i in $(seq 1 240); do [ "$(health)" = 200 ] && return 0; sleep 0.5; done; return 1; }

# the demo model, nothing mounted
$E run -d --name $NAME --network host -e PORT=$PORT $TAG >/dev/null || { bad "docker run"; finish; exit 1; }
wait_health && ok "/health answers 200" || { bad "/health: $(health)"; $E logs $NAME 2>&1 | tail -20; }
ans=$(curl -H 'Content-Type: application/json' -s --max-time 60 http://127.0.0.1:$PORT/generate -d '{"prompt":"What is the capital of France?","temperature":0}' \
      | python3 -c "import json,sys;print(json.load(sys.stdin)['response'])" 2>&1)
expect_eq "$ans" "The capital of France is Paris." "/generate answers Paris (the built-in demo model)"
uid=$($E exec $NAME id -u); [ -n "$uid" ] && [ "$uid" != 0 ] && ok "the server runs as a non-root user (uid $uid)" || bad "uid '$uid'"
for i in $(seq 1 60); do st=$($E inspect --format '{{.State.Health.Status}}' $NAME 2>/dev/null); [ "$st" = healthy ] && break; sleep 1; done
expect_eq "$st" healthy "the HEALTHCHECK (bash /dev/tcp, no curl in the image) says healthy"
t1=$(date +%s.%N)
$E stop -t 30 $NAME >/dev/null
stop_s=$(secs $t1)
code=$($E inspect --format '{{.State.ExitCode}}' $NAME)
expect_eq "$code" 0 "docker stop (SIGTERM): exit status 0 after $stop_s s"
$E logs $NAME 2>&1 | grep -q "g4tp serve: stopped" && ok "SIGTERM drained and stopped the server" || bad "logs: $($E logs $NAME 2>&1 | tail -5)"
$E logs $NAME 2>&1 | grep -q "serving the built-in demo model" && ok "no model mounted: the demo model, said so" || bad "demo fallback not logged"

# a mounted model (read-only) is served instead of the demo
cp -r models/demo $tmp/model && chmod -R a+rX $tmp/model
$E run -d --name $NAME-m --network host -e PORT=$PORT -v $tmp/model:/models:ro $TAG >/dev/null
wait_health || bad "mounted model: /health $(health)"
ids=$(curl -s --max-time 10 http://127.0.0.1:$PORT/v1/models | python3 -c "import json,sys;print([m['id'] for m in json.load(sys.stdin)['data']])" 2>&1)
expect_eq "$ids" "['models']" "a model mounted at /models is served (id from the folder name)"
$E stop -t 30 $NAME-m >/dev/null

# the MPI variant: two ranks in one container
t0=$(date +%s.%N)
if $E build "${ARGS[@]}" --target mpi -t $TAG-mpi . >$tmp/build-mpi.log 2>&1; then
  ok "MPI variant built in $(secs $t0) s"
  msize=$($E image inspect --format '{{.Size}}' $TAG-mpi); echo "# MPI image size: $((msize / 1000000)) MB"
  ans=$($E run --rm --network host --entrypoint mpirun $TAG-mpi -np 2 --oversubscribe --bind-to none --mca btl self,tcp \
        --mca plm_rsh_agent false g4tp run --comm mpi -p "What is the capital of France?" --temperature 0 2>$tmp/mpi.err)
  expect_eq "$ans" "The capital of France is Paris." "MPI variant: mpirun -np 2 in the container answers Paris"
else bad "MPI variant build: $(tail -10 $tmp/build-mpi.log)"; fi
echo "# summary: build $build_s s, image $((size / 1000000)) MB, stop $stop_s s"
finish
