#!/usr/bin/env bash
# The README's two commands in order on a machine without OpenMPI: the first build compiles
# without MPI, the test command installs it and must rebuild what depends on it (a stale build
# passed every test but the MPI ones). Simulated in a copy of the tree: a PATH entry hides mpicc
# for the first `make`, the second `make` sees the real one. Also: changed flags rebuild.
source "$(dirname "$0")/_lib.sh"
[ "${G4_SAN:-0}" = 1 ] && { echo "skip: the build check runs once, in the normal flavour"; exit 77; }
command -v mpicc >/dev/null || { echo "skip: no mpicc on this machine"; exit 77; }
work=$(mktemp -d /tmp/g4build.XXXXXX); trap 'rm -rf "$work"' EXIT
git -C "$G4_ROOT" ls-files -z -co --exclude-standard | (cd "$G4_ROOT" && xargs -0 cp --parents -t "$work") 2>/dev/null \
  || { bad "copy the tree"; finish; exit; }
mkdir -p "$work/nompi"; printf '#!/bin/sh\nexit 127\n' >"$work/nompi/mpicc"; chmod +x "$work/nompi/mpicc"
mpi_built() { # 0 when the binary was built with MPI (its --comm mpi error differs without it)
  [ -x "$work/build/g4tp" ] || return 2
  "$work/build/g4tp" generate --comm mpi --model /nonexistent --prompt-ids 2 --max-new-tokens 1 2>&1 \
    | grep -q "built without MPI" && return 1 || return 0
}
(cd "$work" && PATH="$work/nompi:$PATH" make -s -j2 >"$work/make1.log" 2>&1) || { bad "first build"; tail "$work/make1.log"; }
mpi_built; r=$?
if [ $r = 1 ]; then ok "first build without MPI"; else bad "first build is without MPI (status $r)"; fi
(cd "$work" && make -s -j2 >"$work/make2.log" 2>&1) || { bad "second build"; tail "$work/make2.log"; }
if mpi_built; then ok "second build (MPI now found) rebuilt with MPI"; else bad "second build is stale: still without MPI"; fi
before=$(stat -c %Y "$work/build/src/tp/comm_mpi.o")
sleep 1
(cd "$work" && make -s -j2 >"$work/make3.log" 2>&1)
expect_eq "$(stat -c %Y "$work/build/src/tp/comm_mpi.o")" "$before" "an unchanged configuration rebuilds nothing"
(cd "$work" && make -s -j2 OPT=-O1 >"$work/make4.log" 2>&1)
[ "$(stat -c %Y "$work/build/src/tp/comm_mpi.o")" != "$before" ] && ok "changed flags rebuild" || bad "changed flags (OPT=-O1) rebuilt nothing"
finish
