#!/usr/bin/env bash
# Multi-host runs for real, on one machine: three "hosts" are network namespaces (ip netns), each with
# its own hostname and one address of 10.231.7.0/24 on a veth pair to a bridge in a fourth namespace
# (the switch); nothing outside the namespaces is touched. mpirun runs on host 0 and starts the others
# through a launch agent that enters their namespace in place of ssh (tests/mpi/netns_launch_agent.sh);
# Open MPI talks TCP between them, its shared-memory transport off, as between real hosts, through a
# firewall on each host that opens only the ports docs/mpi.md names. Checks:
# - dp, tp, pp and a mix across the hosts give bitwise the losses of one host (the local backend);
# - the switch port of a host taken down mid-run ends every rank with exit 3 within the timeout, the
#   ranks on either side naming the ranks they lost;
# - a host's processes killed (its orted and ranks, as a host that crashes) end every other rank with
#   exit 3 within the timeout, naming the ranks lost.
# Needs root and iproute2 (exit 77, a skip, without them). Usage: bash mpi_hosts.sh PATH_TO_cleave SOURCE_DIR
set -euo pipefail

cleave=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
source_dir=$(cd "$2" && pwd)
agent=$source_dir/tests/mpi/netns_launch_agent.sh
python=/usr/bin/python3
skip() {
  echo "SKIP mpi_hosts: $*"
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "needs root to make network namespaces"
command -v ip >/dev/null || skip "no ip command (iproute2)"
command -v mpirun >/dev/null || { echo "FAIL: mpirun not found (tools/setup.sh installs openmpi-bin)"; exit 1; }
prefix=clv$$
switch=$prefix-sw
hosts=("$prefix-h0" "$prefix-h1" "$prefix-h2")
addresses=(10.231.7.1 10.231.7.2 10.231.7.3)
tmp=$(mktemp -d)
cleanup() {
  for ns in "${hosts[@]}" "$switch"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$switch" 2>/dev/null || skip "ip netns add fails here (no CAP_SYS_ADMIN, or no network namespaces)"
failed=0
fail() {
  echo "FAIL $*"
  failed=1
}
cd "$tmp"

# 1. The network: a bridge in the switch namespace; per host a veth pair (eth0 in the host, port<i>
#    on the bridge), its address, and a hostname of its own (the agent sets it).
ip -n "$switch" link add br0 type bridge
ip -n "$switch" link set br0 up
for i in 0 1 2; do
  ip netns add "${hosts[$i]}"
  ip link add eth0 netns "${hosts[$i]}" type veth peer name "port$i" netns "$switch"
  ip -n "$switch" link set "port$i" master br0
  ip -n "$switch" link set "port$i" up
  ip -n "${hosts[$i]}" addr add "${addresses[$i]}/24" dev eth0
  ip -n "${hosts[$i]}" link set eth0 up
  ip -n "${hosts[$i]}" link set lo up
done
# A firewall on every host, as docs/mpi.md asks of a real cluster: incoming TCP only to the ports
# Open MPI is told to use (its control channel 47000-47099, MPI's messages 47100-47163), and the
# replies to connections a host opened. It proves those flags are all the ports a run needs.
firewall=0
if command -v nft >/dev/null; then
  firewall=1
  for i in 0 1 2; do
    ip netns exec "${hosts[$i]}" nft -f - <<'NFT' || { firewall=0; break; }
table inet cleave {
  chain input {
    type filter hook input priority 0; policy drop;
    ct state established,related accept
    iif lo accept
    tcp dport 47000-47163 accept
  }
}
NFT
  done
fi
((firewall)) || echo "note: no firewall on the hosts (nft is missing or fails here); tools/setup.sh installs nftables"
# The agent maps each address to its namespace.
for i in 0 1 2; do echo "${addresses[$i]} ${hosts[$i]} host$i"; done >hosts.map

# mpirun on host 0 over TCP only (btl tcp,self: no shared memory, even between ranks of one host;
# both MPI and Open MPI's own out-of-band channel on the hosts' network), started by the agent.
# hostfile_for SLOTS...: a hostfile giving host i SLOTS[i] ranks.
hostfile_for() {
  local i=0
  for slots in "$@"; do
    echo "${addresses[$i]} slots=$slots"
    i=$((i + 1))
  done >hostfile
}
mpirun_on_hosts() {  # SECONDS NP COMMAND...: mpirun ends after SECONDS (timeout)
  local seconds=$1 np=$2
  shift 2
  CLEAVE_HOSTS_MAP=$tmp/hosts.map ip netns exec "${hosts[0]}" unshare --uts sh -c 'hostname host0 && exec "$@"' sh \
    timeout "$seconds" mpirun --allow-run-as-root --oversubscribe -np "$np" --hostfile hostfile \
    --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self --mca btl_tcp_if_include 10.231.7.0/24 --mca oob_tcp_if_include 10.231.7.0/24 \
    --mca oob_tcp_dynamic_ipv4_ports 47000-47099 --mca btl_tcp_port_min_v4 47100 --mca btl_tcp_port_range_v4 64 \
    -x CLEAVE_HOSTS_MAP "$@"
}

# 2. Across the hosts, bitwise the losses of one host.
same_losses() { $python "$source_dir/tests/e2e/same_losses.py" "$@"; }  # LABEL REFERENCE.jsonl RUN.jsonl
# label:model:batch:flags:slots per host
plans=("dp2 over 2 hosts:mlp:16:--dp 2:1 1" "tp2 over 2 hosts:mlp:16:--tp 2:1 1"
       "pp2 over 2 hosts, 1f1b:mlp:16:--pp 2 --microbatches 4 --schedule 1f1b:1 1"
       "dp3xtp2 over 3 hosts (tp inside a host):mlp:24:--dp 3 --tp 2:2 2 2"
       "dp2xpp2 over 2 hosts (a stage per host):fashion_cnn:8:--dp 2 --pp 2 --microbatches 2:2 2")
n=0
for entry in "${plans[@]}"; do
  IFS=: read -r label model batch flags slots <<<"$entry"
  n=$((n + 1))
  # shellcheck disable=SC2086
  "$cleave" compile "$source_dir/examples/$model.cir" --batch "$batch" --train --optimizer sgd:lr=0.01,momentum=0.9 \
    $flags -o "plan$n.cplan" >/dev/null
  # shellcheck disable=SC2086
  read -r -a per_host <<<"$slots"
  ranks=0
  for s in "${per_host[@]}"; do ranks=$((ranks + s)); done
  run=(run "$tmp/plan$n.cplan" --data synthetic --steps 4 --seed 7 --progress never)
  "$cleave" "${run[@]}" --threads "$ranks" --metrics "local$n.jsonl" >/dev/null
  hostfile_for "${per_host[@]}"
  if ! mpirun_on_hosts 120 "$ranks" "$cleave" "${run[@]}" --backend mpi --threads 1 --metrics "$tmp/hosts$n.jsonl" >"hosts$n.log" 2>&1; then
    fail "$label: the run across hosts failed: $(tail -n 20 "hosts$n.log")"
    continue
  fi
  same_losses "$label" "local$n.jsonl" "hosts$n.jsonl" || failed=1
done
# Every rank ran on its host: each process's hostname is its host's (the agent's unshare).
hostfile_for 1 1 1
# (stdout only: OpenMPI's rsh launcher may warn on stderr under load, "setpgid(...) failed in parent")
mpirun_on_hosts 60 3 hostname >where.log 2>where.err || true
[[ $(sort where.log | tr '\n' ' ') == "host0 host1 host2 " ]] ||
  fail "ranks did not run one per host: $(cat where.log where.err)"

# 3. Faults. A 6-rank dp3xtp2 run, two ranks per host, with every rank's exit code and stderr kept
#    in files (the output of a host cut off never reaches mpirun).
"$cleave" compile "$source_dir/examples/mlp.cir" --batch 24 --train --dp 3 --tp 2 -o faults.cplan >/dev/null
timeout_s=8
start_faulty_run() {  # LABEL: starts the run in the background; returns once step 3 is logged
  rm -f steps.jsonl exit.* err.*
  hostfile_for 2 2 2
  mpirun_on_hosts 120 6 --enable-recovery sh -c 'exec 2>"'"$tmp"'/err.$OMPI_COMM_WORLD_RANK"; "$0" "$@"; echo $? >"'"$tmp"'/exit.$OMPI_COMM_WORLD_RANK"' \
    "$cleave" run "$tmp/faults.cplan" --backend mpi --data synthetic --steps 1000000 --threads 1 --progress never \
    --metrics "$tmp/steps.jsonl" --timeout "$timeout_s" --heartbeat 2 >"$1.log" 2>&1 &
  mpirun_pid=$!
  for _ in $(seq 1200); do
    [[ -s steps.jsonl && $(wc -l <steps.jsonl) -ge 3 ]] && return 0
    sleep 0.05
  done
  fail "$1: the run did not reach step 3: $(cat "$1.log")"
  return 1
}
# wait_for_exits LABEL RANKS...: waits (at most the timeout and 10 s) until each rank wrote its exit code;
# prints the seconds it took.
wait_for_exits() {
  local label=$1 start=$SECONDS
  shift
  while ((SECONDS - start < timeout_s + 10)); do
    local done=1
    for rank in "$@"; do [[ -f exit.$rank ]] || done=0; done
    ((done)) && break
    sleep 0.2
  done
  echo $((SECONDS - start))
}
# check_ranks LABEL PATTERN RANKS...: each rank exited 3 with an error line matching PATTERN.
check_ranks() {
  local label=$1 pattern=$2
  shift 2
  for rank in "$@"; do
    if [[ $(cat "exit.$rank" 2>/dev/null) != 3 ]]; then
      fail "$label: rank $rank exited '$(cat "exit.$rank" 2>/dev/null)', not 3: $(cat "err.$rank" 2>/dev/null)"
    elif ! grep -Eq "^cleave: error: rank $rank: .*$pattern" "err.$rank"; then
      fail "$label: rank $rank's error does not match /$pattern/: $(cat "err.$rank")"
    fi
  done
}
# end_run: lets mpirun finish (at most 20 s), then removes what is left.
end_run() {
  for _ in $(seq 100); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$mpirun_pid" 2>/dev/null || true
  wait "$mpirun_pid" 2>/dev/null || true
  for ns in "${hosts[@]}"; do ip netns pids "$ns" | xargs -r kill -9 2>/dev/null || true; done
}

# 3a. Host 2's switch port goes down: hosts 0 and 1 lose ranks 4 and 5, which lose ranks 0 to 3.
label="host 2's link down"
if start_faulty_run link-down; then
  ip -n "$switch" link set port2 down
  took=$(wait_for_exits "$label" 0 1 2 3 4 5)
  check_ranks "$label" "(ranks 4, 5 do not answer|stopped by mpirun \(SIGTERM\): ranks 4, 5 died)" 0 1 2 3
  check_ranks "$label" "ranks 0, 1, 2, 3 do not answer" 4 5
  ((took <= timeout_s + 5)) || fail "$label: the ranks took $took s to stop (timeout $timeout_s s)"
  # Rank 0 waits for rank 4, or for a rank of its group that waits for rank 4 in turn.
  grep -Eq "cleave: warning: rank 0 has waited [0-9] s for rank [0-9]+ .*rank [45] does not answer" err.0 ||
    fail "$label: rank 0 gave no heartbeat warning naming the lost ranks: $(cat err.0)"
  echo "ok   $label: every rank exited 3 after $took s (timeout $timeout_s s); rank 0: $(grep error err.0)"
  ip -n "$switch" link set port2 up
  end_run
fi

# 3b. Host 2 crashes: its orted and ranks are killed at once.
label="host 2's processes killed"
if start_faulty_run host-killed; then
  ip netns pids "${hosts[2]}" | xargs -r kill -9
  took=$(wait_for_exits "$label" 0 1 2 3)
  check_ranks "$label" "(ranks 4, 5 do not answer|stopped by mpirun \(SIGTERM\): ranks 4, 5 died)" 0 1 2 3
  ((took <= timeout_s + 5)) || fail "$label: the ranks took $took s to stop (timeout $timeout_s s)"
  echo "ok   $label: ranks 0-3 exited 3 after $took s; rank 0: $(grep error err.0)"
  end_run
fi

# 3c. The same under mpirun's defaults (no --enable-recovery, no wrapper): mpirun stops the whole job
#     within seconds of losing host 2's daemon ("ORTE has lost communication with a remote daemon"),
#     and leaves no process behind. Open MPI kills the ranks as it tears the hosts down, so their own
#     messages may be lost; those that arrive name ranks 4 and 5 (with any rank being stopped at the
#     same moment, which no longer answers either).
label="host 2's processes killed, mpirun's defaults"
rm -f steps.jsonl
hostfile_for 2 2 2
mpirun_on_hosts 120 6 "$cleave" run "$tmp/faults.cplan" --backend mpi --data synthetic --steps 1000000 --threads 1 \
  --progress never --metrics "$tmp/steps.jsonl" --timeout "$timeout_s" --heartbeat 2 >defaults.log 2>&1 &
mpirun_pid=$!
for _ in $(seq 1200); do [[ -s steps.jsonl && $(wc -l <steps.jsonl) -ge 3 ]] && break; sleep 0.05; done
killed_at=$SECONDS
ip netns pids "${hosts[2]}" | xargs -r kill -9
status=0
wait "$mpirun_pid" || status=$?
took=$((SECONDS - killed_at))
[[ $status -ne 0 && $status -ne 124 ]] || fail "$label: mpirun exited $status"
((took <= timeout_s + 5)) || fail "$label: mpirun took $took s to stop (timeout $timeout_s s)"
grep -q "ORTE has lost communication with a remote daemon" defaults.log || fail "$label: mpirun did not say it lost host 2"
sleep 0.5
left=$(for ns in "${hosts[@]}"; do ip netns pids "$ns"; done | wc -l)
[[ $left -eq 0 ]] || fail "$label: $left processes are left on the hosts"
if grep "^cleave: error: rank" defaults.log | grep -Ev "ranks ([0-9]+, )*4, 5 (died|do not answer)|waiting for rank [45]"; then
  fail "$label: a rank's error does not name ranks 4 and 5: $(grep '^cleave: error' defaults.log)"
fi
echo "ok   $label: mpirun exited $status after $took s, nothing left; $(grep -c '^cleave: error: rank' defaults.log) rank messages arrived"
end_run

[[ $failed -eq 0 ]] && echo "mpi_hosts: all checks passed"
exit $failed
