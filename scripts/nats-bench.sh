#!/usr/bin/env bash
# bus -> JetStream: shmbus-nats out against the same C client publishing the
# same messages straight to a stream, same run, medians of several runs.
# Starts its own nats-server -js (random loopback port, store in a temp dir).
#   scripts/nats-bench.sh [BUILD_DIR] [shmbus-nats-bench options, e.g. --count 200000 --runs 5]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
bench="$build/nats/shmbus-nats-bench"
[[ -x $bench ]] || { echo "nats-bench: build first ($bench missing)" >&2; exit 1; }
server=$(command -v nats-server || echo /usr/sbin/nats-server)
[[ -x $server ]] || { echo "nats-bench: nats-server missing: apt-get install nats-server" >&2; exit 1; }
dir=$(mktemp -d)
"$server" -js -a 127.0.0.1 -p -1 -sd "$dir/store" >"$dir/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
port=""
for _ in $(seq 200); do
  port=$(grep -o 'Listening for client connections on 127.0.0.1:[0-9]*' "$dir/server.log" | grep -o '[0-9]*$' || true)
  [[ -n $port ]] && grep -q "Server is ready" "$dir/server.log" && break
  sleep 0.05
done
[[ -n $port ]] || { echo "nats-bench: nats-server did not start: $(cat "$dir/server.log")" >&2; exit 1; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs;" \
  "cpu0 SMT siblings: $(cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list)"
"$bench" --server "nats://127.0.0.1:$port" "$@"
