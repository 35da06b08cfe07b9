#!/usr/bin/env bash
# A backlog of a million messages through `shmbus-bridge serve` with its
# default options, to `shmbus-consumer tcp://... --verify`, three times: the
# ring is the subscriber's buffer, so a subscriber catching up is never "too
# slow" while the bus still holds what it has not read.
#   BRIDGE=... PRODUCER=... CONSUMER=... INSPECT=... backlog_test.sh
set -euo pipefail
: "${BRIDGE:?}" "${PRODUCER:?}" "${CONSUMER:?}" "${INSPECT:?}"
count=${BACKLOG_MESSAGES:-1000000}
bus="bridge-backlog-$$"
source "$(dirname "${BASH_SOURCE[0]}")/serve_port.sh"
tmp=$(mktemp -d)
cleanup() {
  [[ -n "${serve:-}" ]] && kill "$serve" 2>/dev/null && wait "$serve" 2>/dev/null
  "$INSPECT" rm "$bus" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# 1,048,576 records of 64 bytes: the whole backlog stays in the ring.
"$PRODUCER" "$bus" --create --capacity 1048576 --record-size 64 --count "$count" --size 24 2>"$tmp/producer.err"
"$BRIDGE" serve "$bus" --listen 127.0.0.1:0 2>"$tmp/serve.err" &
serve=$!
port=$(serve_port "$tmp/serve.err" "$bus") || { echo "FAIL: serve did not start: $(cat "$tmp/serve.err")"; exit 1; }

for round in 1 2 3; do
  rc=0
  host=127.0.0.1
  ((round == 2)) && host=localhost  # a host name resolves
  "$CONSUMER" "tcp://$host:$port/$bus" --from earliest --verify --count "$count" --format none \
    2>"$tmp/consumer.err" || rc=$?
  if [[ $rc -ne 0 ]] || ! grep -q "verified OK" "$tmp/consumer.err"; then
    echo "FAIL: round $round: exit $rc: $(cat "$tmp/consumer.err")"
    exit 1
  fi
  grep -q "$count messages" "$tmp/consumer.err" || { echo "FAIL: round $round: $(cat "$tmp/consumer.err")"; exit 1; }
done
echo "bridge backlog: $count messages caught up through a default serve, 3 of 3 rounds"
