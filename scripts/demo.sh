#!/usr/bin/env bash
# The main job: one million messages between two separate processes.
#   scripts/demo.sh [COUNT]
# Installs what is missing, builds shmbus (Release), creates a bus, runs
# shmbus-consumer (--verify --stats) and shmbus-producer as separate processes,
# prints the consumer's summary and removes the bus.
set -euo pipefail
cd "$(dirname "$0")/.."

count=${1:-1000000}
build=${SHMBUS_BUILD_DIR:-build}

scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHMBUS_BUILD_PROGRAMS=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target shmbus-producer shmbus-consumer

producer="$build/producer/shmbus-producer"
consumer="$build/consumer/shmbus-consumer"
bus="demo-$$"
consumer_pid=""
cleanup() {
  [[ -n "$consumer_pid" ]] && kill "$consumer_pid" 2>/dev/null || true
  rm -f "/dev/shm/shmbus.$bus"
}
trap cleanup EXIT

echo "== bus '$bus': $count messages of 128 bytes, producer and consumer in separate processes" >&2
# Create the bus first; the consumer attaches from the earliest record and the
# producer does not start before it is attached, so message 0 is seen.
"$producer" "$bus" --create --capacity 65536 --record-size 256 --keep-open </dev/null 2>/dev/null
"$consumer" "$bus" --from earliest --verify --stats --format none 2>"$build/demo-consumer.txt" &
consumer_pid=$!
"$producer" "$bus" --count "$count" --size 128 --wait-for-readers 1 --wait-timeout 30s
status=0
wait "$consumer_pid" || status=$?
consumer_pid=""
echo "== consumer summary" >&2
cat "$build/demo-consumer.txt" >&2
exit "$status"
