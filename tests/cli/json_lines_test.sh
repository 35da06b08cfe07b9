#!/usr/bin/env bash
# With --json, every line a program writes on its JSON stream is one JSON
# object with "program" (docs/programs.md, "Every line is JSON"): summaries,
# progress lines, notices and errors alike. Each case runs one program the
# ways that used to print text beside its JSON, and parses every line:
#   PRODUCER=... CONSUMER=... INSPECT=... BRIDGE=... NATS=... NATS_SERVER=... json_lines_test.sh CASE
# BRIDGE, NATS and NATS_SERVER may be empty (not built, not installed): the
# cases that need them say so and are skipped (exit 77).
set -euo pipefail

case_name=${1:?usage: json_lines_test.sh CASE}
: "${PRODUCER:?set PRODUCER to the shmbus-producer binary}"
: "${CONSUMER:?set CONSUMER to the shmbus-consumer binary}"
: "${INSPECT:?set INSPECT to the shmbus-inspect binary}"
BRIDGE=${BRIDGE:-}
NATS=${NATS:-}
NATS_SERVER=${NATS_SERVER:-}

bus_prefix=cli
work_prefix=shmbus-json-lines
# shellcheck source=../lib/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/harness.sh"

# all_json FILE...: every line of every FILE is a JSON object; in a FILE
# named *.err (a program's stderr), one with "program".
all_json() {
  python3 - "$@" <<'PY' || fail "not every line is a JSON object"
import json, sys
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                o = json.loads(line)
            except ValueError as e:
                sys.exit(f"{path}:{n}: not JSON ({e}): {line.rstrip()}")
            if not isinstance(o, dict):
                sys.exit(f"{path}:{n}: not an object: {line.rstrip()}")
            if path.endswith(".err") and "program" not in o:
                sys.exit(f"{path}:{n}: no \"program\": {line.rstrip()}")
PY
}

# has FILE REGEX WHAT: some line of FILE matches REGEX (so that all_json
# did not pass on an empty file).
has() {
  grep -Eq -- "$2" "$1" || fail "$(basename "$1"): no $3: $(cat "$1")"
}

# wait_for_line FILE REGEX: waits up to 10 s for a line of FILE matching REGEX.
wait_for_line() {
  local i
  for i in $(seq 200); do
    grep -Eq -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "$(basename "$1"): no line matching /$2/ in 10 s"
}

# stop PID: SIGINT, then waits for it (its exit status is not checked).
stop() {
  kill -INT "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# The port a "serving bus 'B' on HOST:PORT" notice names.
served_port() {
  sed -nE "s/.*serving bus '[^']*' on [0-9.]+:([0-9]+).*/\1/p" "$1" | head -n 1
}

needs() {
  [[ -n "$1" ]] || { echo "[$case_name] skipped: $2" >&2; exit 77; }
}

case "$case_name" in

producer_consumer)
  new_bus bus
  printf 'a\nb\nc\n' | "$PRODUCER" "$bus" --create --keep-open --json 2>"$work/producer.err"
  # A bus that exists already with other options: an error, as JSON; with --as-is, used as it is.
  "$PRODUCER" "$bus" --create --capacity 1024 --count 0 --keep-open --json 2>"$work/differ.err" &&
    fail "--create with other options than the bus's own was accepted"
  has "$work/differ.err" '"code":"options_differ"' "options differ"
  "$PRODUCER" "$bus" --create --as-is --capacity 1024 --count 0 --keep-open --json 2>"$work/as_is.err" ||
    fail "--as-is: $(cat "$work/as_is.err")"
  # --verify of messages that are not synthetic: one problem per message, then the summary.
  rc=0
  "$CONSUMER" "$bus" --verify --json --count 3 --format json >"$work/verify.out" 2>"$work/verify.err" || rc=$?
  [[ $rc -eq 1 ]] || fail "--verify of text lines: exit $rc, want 1"
  has "$work/verify.err" '"notice":"bus .*: verify: message seq 0 ' "verify problem"
  has "$work/verify.err" '"code":"verify_failed"' "summary with the error"
  # A named reader whose position is gone: a notice before the data.
  "$CONSUMER" "$bus" --name keeper --count 1 --json --format none 2>"$work/named.err"
  new_bus small
  "$PRODUCER" "$small" --create --capacity 16 --keep-open --count 0 --json 2>"$work/small_create.err"
  "$CONSUMER" "$small" --name gone --count 1 --idle-timeout 100ms --json --format none 2>"$work/gone1.err" || true
  "$PRODUCER" "$small" --count 100 --size 32 --keep-open --json 2>"$work/small_fill.err"
  "$CONSUMER" "$small" --name gone --count 1 --json --format none 2>"$work/gone2.err"
  has "$work/gone2.err" '"notice":".*no longer retained' "resume-gap notice"
  # A failure: one JSON error.
  new_bus missing
  "$CONSUMER" "$missing" --json 2>"$work/missing.err" && fail "a missing bus: exit 0"
  has "$work/missing.err" '"code":"not_found"' "error"
  all_json "$work"/*.err "$work/verify.out"
  ;;

bridge)
  needs "$BRIDGE" "shmbus-bridge not built"
  new_bus bus
  "$PRODUCER" "$bus" --create --count 5 --size 32 --keep-open 2>/dev/null
  "$BRIDGE" serve "$bus" --listen 127.0.0.1:0 --json --stats-interval 100ms 2>"$work/serve.err" &
  serve=$!
  pids+=("$serve")
  wait_for_line "$work/serve.err" "serving bus"
  port=$(served_port "$work/serve.err")
  [[ -n "$port" ]] || fail "no port in $(cat "$work/serve.err")"
  "$CONSUMER" "tcp://127.0.0.1:$port/$bus" --count 5 --verify --json --format none 2>"$work/tcp_consumer.err"
  wait_for_line "$work/serve.err" '"report":"progress"'
  # A mirror of it, and a mirror of a server that is not there (reconnect errors).
  new_bus copy
  "$BRIDGE" mirror --connect "127.0.0.1:$port" --remote-bus "$bus" --bus "$copy" --json \
    --stats-interval 100ms 2>"$work/mirror.err" &
  mirror=$!
  pids+=("$mirror")
  wait_for_line "$work/mirror.err" "mirroring"
  wait_for_line "$work/mirror.err" '"report":"progress"'
  stop "$mirror"
  has "$work/mirror.err" '"report":"summary"' "final stats"
  new_bus nowhere
  "$BRIDGE" mirror --connect 127.0.0.1:1 --remote-bus "$bus" --bus "$nowhere" --json --backoff-max 100ms \
    --stats-interval 100ms 2>"$work/mirror_refused.err" &
  refused=$!
  pids+=("$refused")
  wait_for_line "$work/mirror_refused.err" "reconnecting in"
  wait_for_line "$work/mirror_refused.err" '"report":"progress"'
  stop "$refused"
  stop "$serve"
  has "$work/serve.err" '"notice":"tcp:127.0.0.1:[0-9]+: subscribed' "connection notice"
  has "$work/serve.err" '"report":"summary"' "final stats"
  # Errors: a bus that is missing, a bad command line.
  new_bus missing
  "$BRIDGE" serve "$missing" --listen 127.0.0.1:0 --json 2>"$work/serve_missing.err" && fail "serve of a missing bus: exit 0"
  has "$work/serve_missing.err" '"code":"not_found"' "error"
  "$BRIDGE" serve "$missing" --json --bogus 2>"$work/serve_usage.err" && fail "--bogus: exit 0"
  has "$work/serve_usage.err" '"code":"usage"' "usage error"
  all_json "$work"/*.err
  ;;

nats)
  needs "$NATS" "shmbus-nats not built"
  needs "$NATS_SERVER" "nats-server not installed (apt-get install nats-server)"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$NATS_SERVER" -js -a 127.0.0.1 -p "$port" -sd "$work/store" --http_port 0 >"$work/server.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "Server is ready" "$work/server.log" && break; sleep 0.05; done
  grep -q "Server is ready" "$work/server.log" || fail "nats-server did not start"
  url="nats://127.0.0.1:$port"
  new_bus bus
  "$PRODUCER" "$bus" --create --count 5 --size 32 --keep-open 2>/dev/null
  stream="JSONLINES$$"
  "$NATS" out "$bus" --stream "$stream" --server "$url" --json 2>"$work/out_missing_stream.err" &&
    fail "out to a missing stream: exit 0"
  has "$work/out_missing_stream.err" '"error":".*--create-stream' "error naming --create-stream"
  "$NATS" out "$bus" --stream "$stream" --create-stream --server "$url" --count 5 --json \
    --stats-interval 50ms 2>"$work/out.err"
  has "$work/out.err" '"report":"summary"' "summary"
  new_bus back
  "$NATS" in "$back" --stream "$stream" --durable jl --server "$url" --count 5 --json \
    --stats-interval 50ms 2>"$work/in.err"
  has "$work/in.err" '"report":"summary"' "summary"
  all_json "$work"/out*.err "$work/in.err"
  ;;

inspect)
  new_bus bus
  "$PRODUCER" "$bus" --create --count 5 --size 32 --keep-open 2>/dev/null
  "$INSPECT" list --json >"$work/list.out"
  "$INSPECT" show "$bus" --json >"$work/show.out"
  "$INSPECT" check "$bus" --json >"$work/check.out"
  "$INSPECT" dump "$bus" --json >"$work/dump.out"
  "$INSPECT" watch "$bus" --json --count 2 --interval 100ms >"$work/watch.out"
  "$INSPECT" gc "$bus" --json >"$work/gc.out"
  new_bus missing
  "$INSPECT" show "$missing" --json >"$work/missing.out" && fail "show of a missing bus: exit 0"
  has "$work/missing.out" '"code":"not_found"' "error"
  [[ "$(wc -l <"$work/watch.out")" -eq 2 ]] || fail "watch --count 2: $(cat "$work/watch.out")"
  all_json "$work"/*.out
  ;;

*)
  fail "unknown case"
  ;;
esac
echo "[$case_name] ok"
