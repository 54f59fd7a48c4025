#!/bin/sh
# Open MPI's launch agent for tests/e2e/mpi_hosts.sh, in place of ssh: `agent HOST COMMAND...` runs
# COMMAND (a shell command line, as ssh runs it) in the network namespace of HOST, with that host's
# hostname. $CLEAVE_HOSTS_MAP lists "ADDRESS NAMESPACE HOSTNAME" per line.
set -e
host=$1
shift
line=$(grep "^$host " "$CLEAVE_HOSTS_MAP") || { echo "netns_launch_agent: unknown host $host" >&2; exit 255; }
namespace=$(echo "$line" | cut -d' ' -f2)
name=$(echo "$line" | cut -d' ' -f3)
exec ip netns exec "$namespace" unshare --uts sh -c 'hostname "$0" && exec sh -c "$*"' "$name" "$@"
