# Two simulated hosts for the MPI tests (sourced after _lib.sh; not a test itself): network
# namespaces A and B joined by a veth pair, with only the addresses assigned here
# (10.213.0.1/30 in A, 10.213.0.2/30 in B) — nothing else is ever a target. One CPU per
# namespace; OpenMPI's TCP transport only (no shared memory); mpirun runs in A and starts B's
# daemon through an "rsh agent" that enters B.
#   netns_setup        creates them (returns 77 with a message when it cannot: not root, no ip)
#   ns_mpirun ARGS...  mpirun -np 2 across them, rank 0 in A, rank 1 in B (ended after
#                      $NS_TIMEOUT s, default 180)
#   ns_pids NS NAME    pids in namespace NS of the programs called NAME (mpirun, g4tp)
#   ns_tun_link / ns_veth_link   MPI over a link with latency (bench/tun_relay) / the veth
#   netns_cleanup      kills what runs in them and deletes them (also on EXIT)
NS_A=g4a$$; NS_B=g4b$$; ADDR_A=10.213.0.1; ADDR_B=10.213.0.2; NS_NET=10.213.0.0/30
# a second link with latency, through bench/tun_relay (ns_tun_link): 10.213.1.1 in A, .2 in B
TUN_A=10.213.1.1; TUN_B=10.213.1.2; TUN_NET=10.213.1.0/30
NS_TMP=$(mktemp -d /tmp/g4tp-netns.XXXXXX)
NS_UP=0

netns_cleanup() {
  local ns p
  [ -n "${TUN_PID:-}" ] && kill "$TUN_PID" 2>/dev/null
  for ns in "$NS_A" "$NS_B"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  NS_UP=0
  rm -rf "$NS_TMP"
}

netns_setup() {
  [ "$(id -u)" = 0 ] || { echo "skipped: network namespaces need root"; return 77; }
  command -v ip >/dev/null || { echo "skipped: ip (iproute2) missing"; return 77; }
  command -v mpirun >/dev/null || { echo "mpirun missing (scripts/install-deps.sh installs OpenMPI)"; return 1; }
  ip netns add "$NS_A" 2>"$NS_TMP/err" || { echo "skipped: cannot create network namespaces: $(cat "$NS_TMP/err")"; return 77; }
  NS_UP=1
  ip netns add "$NS_B" &&
  ip link add "v$NS_A" type veth peer name "v$NS_B" &&
  ip link set "v$NS_A" netns "$NS_A" && ip link set "v$NS_B" netns "$NS_B" &&
  ip -n "$NS_A" addr add $ADDR_A/30 dev "v$NS_A" && ip -n "$NS_B" addr add $ADDR_B/30 dev "v$NS_B" &&
  ip -n "$NS_A" link set "v$NS_A" up && ip -n "$NS_B" link set "v$NS_B" up &&
  ip -n "$NS_A" link set lo up && ip -n "$NS_B" link set lo up || { echo "veth setup failed"; return 1; }
  local cpu_b=1; [ "$(nproc)" -lt 2 ] && cpu_b=0
  # the rsh agent: "agent HOST command..." runs the command inside HOST's namespace
  cat >"$NS_TMP/agent" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in $ADDR_A|$TUN_A) ns=$NS_A; cpu=0;; $ADDR_B|$TUN_B) ns=$NS_B; cpu=$cpu_b;; *) echo "agent: unknown host \$host" >&2; exit 1;; esac
exec ip netns exec \$ns taskset -c \$cpu sh -c "\$*"
EOF
  chmod +x "$NS_TMP/agent"
  printf '%s slots=1\n%s slots=1\n' $ADDR_A $ADDR_B >"$NS_TMP/hosts"
  NS_HOSTS=$NS_TMP/hosts; NS_NETMASK=$NS_NET
  return 0
}

# --bind-to none: each daemon would think it owns the machine and bind its rank to core 0
ns_mpirun() {
  ip netns exec "$NS_A" taskset -c 0 timeout "${NS_TIMEOUT:-180}" mpirun --allow-run-as-root --hostfile "$NS_HOSTS" -np 2 --bind-to none \
    --mca plm_rsh_agent "$NS_TMP/agent" --mca btl self,tcp --mca btl_tcp_if_include "$NS_NETMASK" \
    --mca oob_tcp_if_include "$NS_NETMASK" "$@"
}

ns_pids() { # NS NAME
  local p
  for p in $(ip netns pids "$1" 2>/dev/null); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ] && echo "$p"
  done
}

ns_rx_bytes() { ip netns exec "$1" cat "/sys/class/net/v$1/statistics/rx_bytes"; }

# ns_tun_link RELAY DELAY_US: A and B also joined through RELAY (bench/tun_relay), which holds
# each packet DELAY_US; MPI then runs over that link (NS_HOSTS, NS_NETMASK). TUN_PID is the relay.
ns_tun_link() {
  [ -n "${TUN_PID:-}" ] && { kill "$TUN_PID" 2>/dev/null; wait "$TUN_PID" 2>/dev/null; }
  "$1" "$NS_A" "t$NS_A" "$NS_B" "t$NS_B" "$2" >"$NS_TMP/relay.out" 2>&1 &
  TUN_PID=$!
  local i; for i in $(seq 1 50); do grep -q ready "$NS_TMP/relay.out" && break; sleep 0.1; done
  grep -q ready "$NS_TMP/relay.out" || { cat "$NS_TMP/relay.out"; return 1; }
  ip -n "$NS_A" addr add $TUN_A/30 dev "t$NS_A" && ip -n "$NS_B" addr add $TUN_B/30 dev "t$NS_B" &&
  ip -n "$NS_A" link set "t$NS_A" mtu 65000 up && ip -n "$NS_B" link set "t$NS_B" mtu 65000 up || return 1
  printf '%s slots=1\n%s slots=1\n' $TUN_A $TUN_B >"$NS_TMP/hosts.tun"
  NS_HOSTS=$NS_TMP/hosts.tun; NS_NETMASK=$TUN_NET
}
ns_veth_link() { NS_HOSTS=$NS_TMP/hosts; NS_NETMASK=$NS_NET; }
