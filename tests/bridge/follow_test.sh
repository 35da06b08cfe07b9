#!/usr/bin/env bash
# shmbus-consumer tcp://HOST:PORT/BUS --follow --verify reads through
# `shmbus-bridge serve` while the bridge is killed (SIGKILL: a dropped
# connection), stopped (SIGTERM: error shutdown) and restarted, and while the
# consumer itself is stopped long enough to be cut off as slow. It must print
# every message exactly once, in order, and report as lost exactly what the
# bus no longer held when it came back, and nothing else.
#   BRIDGE=... PRODUCER=... CONSUMER=... INSPECT=... follow_test.sh
set -euo pipefail
: "${BRIDGE:?}" "${PRODUCER:?}" "${CONSUMER:?}" "${INSPECT:?}"
source "$(dirname "${BASH_SOURCE[0]}")/serve_port.sh"
tmp=$(mktemp -d)
buses=()
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for b in "${buses[@]}"; do "$INSPECT" rm "$b" >/dev/null 2>&1 || true; done
  [[ -n "${KEEP_TMP:-}" ]] || rm -rf "$tmp"
}
trap cleanup EXIT
[[ -n "${KEEP_TMP:-}" ]] && echo "files in $tmp"
fail() { echo "FAIL: $*"; for f in "$tmp"/*.err; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; }

# serve BUS PORT LOG [ARGS...]: starts serve, sets $serve and $port (PORT 0: any).
serve() {
  local bus=$1 want=$2 log=$3
  shift 3
  "$BRIDGE" serve "$bus" --listen "127.0.0.1:$want" --stats-interval 0 "$@" 2>>"$log" &
  serve=$!
  pids+=("$serve")
  port=$(serve_port "$log" "$bus" "$want" "$serve") || fail "serve did not start on port $want"
}

# wait_for PATTERN FILE: up to 20 s for a line matching PATTERN.
wait_for() {
  for _ in $(seq 400); do
    grep -q -- "$1" "$2" && return 0
    sleep 0.05
  done
  return 1
}

# The consumer's printed sequences (--format hex: "SEQ HEX") must be
# strictly increasing: no duplicate, no step back.
check_order() {
  awk 'NR > 1 && $1 <= prev { print "seq " $1 " after " prev; bad = 1; exit } { prev = $1 }
       END { exit bad }' "$1" || fail "$2: printed out of order or twice"
}

# Round 1: no loss possible (the ring holds everything), the bridge is killed
# with SIGKILL and later stopped with SIGTERM, each time restarted on its port.
count=40000
bus="bridge-follow-a-$$"
buses+=("$bus")
"$PRODUCER" "$bus" --create --capacity 65536 --record-size 64 --keep-open </dev/null 2>/dev/null
serve "$bus" 0 "$tmp/serve1.err"
"$CONSUMER" "tcp://127.0.0.1:$port/$bus" --follow --verify --count "$count" --format hex \
  >"$tmp/c1.out" 2>"$tmp/c1.err" &
consumer=$!
pids+=("$consumer")
"$PRODUCER" "$bus" --count "$count" --size 24 --rate 10000 2>"$tmp/p1.err" &
producer=$!
sleep 1
kill -KILL "$serve"; wait "$serve" 2>/dev/null || true
sleep 0.7
serve "$bus" "$port" "$tmp/serve1.err"
wait_for "reconnected" "$tmp/c1.err" || fail "round 1: no reconnect within 20 s of the restart"
sleep 0.5
kill -TERM "$serve"; wait "$serve" 2>/dev/null || true
sleep 0.5
serve "$bus" "$port" "$tmp/serve1.err"
wait "$producer" || fail "round 1: producer failed"
rc=0
wait "$consumer" || rc=$?
[[ $rc -eq 0 ]] || fail "round 1: consumer exit $rc"
grep -q "$count messages, 0 lost" "$tmp/c1.err" || fail "round 1: not $count messages, 0 lost"
grep -q "verified OK (no gaps" "$tmp/c1.err" || fail "round 1: not verified"
grep -q "reconnected 2 times" "$tmp/c1.err" || fail "round 1: expected 2 reconnects"
grep -q "shutdown" "$tmp/c1.err" || fail "round 1: the SIGTERM was not seen as shutdown"
[[ $(wc -l <"$tmp/c1.out") -eq $count ]] || fail "round 1: printed $(wc -l <"$tmp/c1.out") lines"
check_order "$tmp/c1.out" "round 1"
kill -TERM "$serve"; wait "$serve" 2>/dev/null || true
echo "round 1: $count messages through a killed and a stopped bridge, none twice, none lost"

# Round 2: a ring of 1024 records and the bridge down for 1.5 s while the
# producer goes on: the bus laps the consumer, which comes back at the oldest
# retained record and reports the exact loss; then the consumer itself is
# stopped (SIGSTOP) behind a 4 KiB server buffer until the bus laps its
# subscription (--slow disconnect: error slow), and reconnects.
count=100000
bus="bridge-follow-b-$$"
buses+=("$bus")
"$PRODUCER" "$bus" --create --capacity 1024 --record-size 256 --keep-open </dev/null 2>/dev/null
serve "$bus" 0 "$tmp/serve2.err" --buffer 4096
"$CONSUMER" "tcp://127.0.0.1:$port/$bus" --follow --verify --idle-timeout 8s --format hex \
  >"$tmp/c2.out" 2>"$tmp/c2.err" &
consumer=$!
pids+=("$consumer")
"$PRODUCER" "$bus" --count "$count" --size 200 --rate 20000 2>"$tmp/p2.err" &
producer=$!
sleep 1
kill -KILL "$serve"; wait "$serve" 2>/dev/null || true
sleep 1.5
serve "$bus" "$port" "$tmp/serve2.err" --buffer 4096
wait_for "reconnected" "$tmp/c2.err" || fail "round 2: no reconnect within 20 s of the restart"
kill -STOP "$consumer"
sleep 2
kill -CONT "$consumer"
wait "$producer" || fail "round 2: producer failed"
rc=0
wait "$consumer" || rc=$?
[[ $rc -eq 0 ]] || fail "round 2: consumer exit $rc"
summary=$(grep "messages, [0-9]* lost" "$tmp/c2.err" | tail -n 1)
got=$(sed -n 's/.*: \([0-9]*\) messages, \([0-9]*\) lost.*/\1/p' <<<"$summary")
lost=$(sed -n 's/.*: \([0-9]*\) messages, \([0-9]*\) lost.*/\2/p' <<<"$summary")
[[ -n "$got" && -n "$lost" ]] || fail "round 2: no summary"
(( lost > 0 )) || fail "round 2: the bus lapped the consumer but nothing was reported lost"
(( got + lost == count )) || fail "round 2: $got messages + $lost lost != $count"
grep -q "verified OK (the $lost missing were all reported lost)" "$tmp/c2.err" || fail "round 2: not verified"
grep -q "no longer retained by the server: counted as lost" "$tmp/c2.err" || fail "round 2: loss not said"
[[ $(wc -l <"$tmp/c2.out") -eq $got ]] || fail "round 2: printed $(wc -l <"$tmp/c2.out") lines, summary says $got"
check_order "$tmp/c2.out" "round 2"
reconnects=$(grep -c "reconnecting (--follow)" "$tmp/c2.err" || true)
echo "round 2: $got messages + $lost reported lost = $count ($reconnects connections lost)"

# Round 3: what --follow does not retry: the bridge comes back with another
# token; the consumer ends with one line naming bad-token, exit 1.
echo first >"$tmp/token"
echo second >"$tmp/other"
serve "$bus" 0 "$tmp/serve3.err" --token-file "$tmp/token"
"$CONSUMER" "tcp://127.0.0.1:$port/$bus" --follow --from latest --token-file "$tmp/token" --format none \
  2>"$tmp/c3.err" &
consumer=$!
pids+=("$consumer")
wait_for "subscribed" "$tmp/serve3.err" || fail "round 3: the consumer did not subscribe"
kill -TERM "$serve"; wait "$serve" 2>/dev/null || true
serve "$bus" "$port" "$tmp/serve3.err" --token-file "$tmp/other"
rc=0
wait "$consumer" || rc=$?
[[ $rc -eq 1 ]] || fail "round 3: bad token after a reconnect: exit $rc"
tail -n 1 "$tmp/c3.err" | grep -q "bad-token" || fail "round 3: the last line does not name bad-token"
kill -TERM "$serve"; wait "$serve" 2>/dev/null || true
echo "round 3: a bad token on reconnecting ends --follow with one line, exit 1"
echo "bridge follow: all rounds passed"
