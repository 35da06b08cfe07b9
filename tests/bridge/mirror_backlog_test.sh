#!/usr/bin/env bash
# `shmbus-bridge mirror` with its default options catches up a backlog of a
# million messages that `shmbus-bridge serve` (defaults too) forwards from a
# bus holding all of it, in one connection: every message arrives on the
# local bus under its own sequence number, byte for byte (checked by
# shmbus-consumer --verify on the local bus), and the mirror neither fails
# nor reconnects: not even when a local reader stops for longer than
# serve's --idle-timeout while the mirror waits for room on the local bus.
#   BRIDGE=... PRODUCER=... CONSUMER=... INSPECT=... [MIRROR_MESSAGES=N] mirror_backlog_test.sh
set -euo pipefail
: "${BRIDGE:?}" "${PRODUCER:?}" "${CONSUMER:?}" "${INSPECT:?}"
count=${MIRROR_MESSAGES:-1000000}
remote="mirror-backlog-src-$$"
local_bus="mirror-backlog-dst-$$"
source "$(dirname "${BASH_SOURCE[0]}")/serve_port.sh"
tmp=$(mktemp -d)
cleanup() {
  for p in ${consumer:-} ${mirror:-} ${serve:-}; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$INSPECT" rm "$remote" >/dev/null 2>&1 || true
  "$INSPECT" rm "$local_bus" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.err; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; }

# 1,048,576 records of 64 bytes: the whole backlog stays in the source's ring.
"$PRODUCER" "$remote" --create --capacity 1048576 --record-size 64 --count "$count" --size 24 2>"$tmp/producer.err"
"$BRIDGE" serve "$remote" --listen 127.0.0.1:0 2>"$tmp/serve.err" &
serve=$!
port=$(serve_port "$tmp/serve.err" "$remote") || fail "serve did not start"

# The local bus exists (the mirror's default geometry: 65,536 records, the
# source's record size) before its reader attaches, so that the reader sees
# it from seq 0 and, holding the mirror back, loses nothing.
"$PRODUCER" "$local_bus" --create --capacity 65536 --record-size 64 --keep-open </dev/null 2>/dev/null
"$CONSUMER" "$local_bus" --from earliest --verify --count "$count" --format none 2>"$tmp/consumer.err" &
consumer=$!
for _ in $(seq 200); do
  "$INSPECT" show "$local_bus" 2>/dev/null | grep -q "shmbus-consumer" && break
  sleep 0.05
done

"$BRIDGE" mirror --connect "127.0.0.1:$port" --remote-bus "$remote" --bus "$local_bus" 2>"$tmp/mirror.err" &
mirror=$!
rc=0
wait "$consumer" || rc=$?
consumer=
[[ $rc -eq 0 ]] || fail "consumer exit $rc"
grep -q "$count messages, 0 lost" "$tmp/consumer.err" || fail "consumer did not get $count messages"
grep -q "seq 0\.\.$((count - 1))" "$tmp/consumer.err" || fail "not seq 0..$((count - 1))"
grep -q "verified OK (no gaps" "$tmp/consumer.err" || fail "not verified"
# The source's stream ended: the mirror closes the local bus and exits 0.
rc=0
wait "$mirror" || rc=$?
mirror=
[[ $rc -eq 0 ]] || fail "mirror exit $rc"
grep -q "connects=1 failures=0 messages=$count gaps=0 lost=0" "$tmp/mirror.err" ||
  fail "the mirror reconnected, failed or lost: $(grep stats: "$tmp/mirror.err" | tail -n 1)"
! grep -q "reconnecting" "$tmp/mirror.err" || fail "the mirror reconnected"
echo "round 1: $count messages mirrored in one connection, verified"

# Round 2: the local reader is stopped for 3 s in the middle; the mirror
# waits for room on the local bus, and keeps its subscription alive meanwhile
# (serve --idle-timeout 1s stands in for the default 15 s).
kill "$serve" 2>/dev/null; wait "$serve" 2>/dev/null || true
"$INSPECT" rm "$local_bus" >/dev/null 2>&1 || true
"$BRIDGE" serve "$remote" --listen 127.0.0.1:0 --idle-timeout 1s --heartbeat 250ms 2>"$tmp/serve2.err" &
serve=$!
port=$(serve_port "$tmp/serve2.err" "$remote") || fail "round 2: serve did not start"
"$PRODUCER" "$local_bus" --create --capacity 65536 --record-size 64 --keep-open </dev/null 2>/dev/null
"$CONSUMER" "$local_bus" --from earliest --verify --count "$count" --format none 2>"$tmp/consumer2.err" &
consumer=$!
for _ in $(seq 200); do
  "$INSPECT" show "$local_bus" 2>/dev/null | grep -q "shmbus-consumer" && break
  sleep 0.05
done
kill -STOP "$consumer"
"$BRIDGE" mirror --connect "127.0.0.1:$port" --remote-bus "$remote" --bus "$local_bus" 2>"$tmp/mirror2.err" &
mirror=$!
sleep 3
kill -CONT "$consumer"
rc=0
wait "$consumer" || rc=$?
c=$consumer
consumer=
[[ $rc -eq 0 ]] || fail "round 2: consumer exit $rc"
grep -q "$count messages, 0 lost" "$tmp/consumer2.err" || fail "round 2: consumer did not get $count messages"
grep -q "verified OK (no gaps" "$tmp/consumer2.err" || fail "round 2: not verified"
rc=0
wait "$mirror" || rc=$?
mirror=
[[ $rc -eq 0 ]] || fail "round 2: mirror exit $rc"
grep -q "connects=1 failures=0 messages=$count gaps=0 lost=0" "$tmp/mirror2.err" ||
  fail "round 2: the mirror reconnected, failed or lost: $(grep stats: "$tmp/mirror2.err" | tail -n 1)"
echo "round 2: $count messages mirrored in one connection past a stopped local reader, verified"
echo "mirror backlog: $count messages mirrored in one connection, verified"
