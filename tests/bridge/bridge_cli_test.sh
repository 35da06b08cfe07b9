#!/usr/bin/env bash
# shmbus-bridge as a program: command-line errors exit 2 with one line,
# runtime errors exit 1, SIGTERM stops a running server cleanly (exit 0,
# final stats line).   BRIDGE=... bridge_cli_test.sh
set -euo pipefail
: "${BRIDGE:?set BRIDGE to the shmbus-bridge binary}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect() {  # expect RC PATTERN -- ARGS...
  local want=$1 pattern=$2
  shift 3
  local rc=0
  "$BRIDGE" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL: shmbus-bridge $* exited $rc, expected $want: $(cat "$tmp/err")"
    exit 1
  fi
  if [[ $(wc -l <"$tmp/err") -ne 1 ]] || ! grep -q -- "$pattern" "$tmp/err"; then
    echo "FAIL: shmbus-bridge $*: expected one line matching '$pattern', got: $(cat "$tmp/err")"
    exit 1
  fi
}

if ! "$BRIDGE" --version | grep -q '^shmbus-bridge [0-9]'; then
  echo "FAIL: --version"
  exit 1
fi
expect 2 "subcommand is required" --
expect 2 "BUS is required" -- serve
expect 2 "token-file is required" -- serve b --listen 0.0.0.0:0
expect 2 "bad port" -- serve b --listen 127.0.0.1:99999
expect 2 "not in" -- serve b --slow sometimes
expect 2 "invalid name" -- serve 'a/b' --listen 127.0.0.1:0
expect 1 "cannot read a token" -- serve b --listen 127.0.0.1:0 --token-file "$tmp/none"
expect 2 "not an IP address" -- serve b --listen nohost:1
expect 2 "go together" -- serve b --listen 127.0.0.1:0 --tls-cert "$tmp/cert.pem"
expect 1 "cannot load a PEM certificate" -- serve b --listen 127.0.0.1:0 --tls-cert "$tmp/none.pem" --tls-key "$tmp/none.key"
expect 2 "connect is required" -- mirror --remote-bus a --bus b
expect 2 "expected HOST:PORT" -- mirror --connect 127.0.0.1 --remote-bus a --bus b
expect 2 "not an IP address" -- mirror --connect nohost:1 --remote-bus a --bus b
expect 2 "invalid name" -- mirror --connect 127.0.0.1:1 --remote-bus a --bus 'x/y'

# shmbus-consumer tcp://: usage errors exit 2, a failed connection exits 1, one line each.
if [[ -n "${CONSUMER:-}" ]]; then
  cexpect() {  # cexpect RC PATTERN -- ARGS...
    local want=$1 pattern=$2
    shift 3
    local rc=0
    "$CONSUMER" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    if [[ $rc -ne $want ]] || [[ $(wc -l <"$tmp/err") -ne 1 ]] || ! grep -q -- "$pattern" "$tmp/err"; then
      echo "FAIL: shmbus-consumer $* exited $rc (expected $want, one line matching '$pattern'): $(cat "$tmp/err")"
      exit 1
    fi
  }
  cexpect 2 "expected tcp://HOST:PORT/BUS" -- tcp://127.0.0.1:1
  cexpect 2 "bad port" -- tcp://127.0.0.1:x/b
  cexpect 2 "applies to a local bus only" -- tcp://127.0.0.1:1/b --name me
  cexpect 1 "cannot connect" -- tcp://127.0.0.1:1/b --follow  # the first connection is not retried
  cexpect 2 "apply to tcp://HOST:PORT/BUS only" -- b --tls-ca "$tmp/ca.pem"
  cexpect 1 "cannot connect" -- tcp://127.0.0.1:1/b
fi

# A bus that is not there fails at start (a unit that looks healthy while
# it serves nothing is worse), or is waited for with --wait-for-bus.
bus="bridge-cli-$$"
expect 1 "bus '$bus'.*not" -- serve "$bus" --listen 127.0.0.1:0
expect 1 "does not exist (waited 100 ms)" -- serve "$bus" --listen 127.0.0.1:0 --wait-for-bus 100ms
expect 2 "wait-for-bus" -- serve "$bus" --listen 127.0.0.1:0 --wait-for-bus soon

"$BRIDGE" serve "$bus" --listen 127.0.0.1:0 --json --stats-interval 0 --wait-for-bus 30s 2>"$tmp/serve.err" &
pid=$!
"$PRODUCER" "$bus" --create --count 0 --keep-open 2>/dev/null
trap 'rm -rf "$tmp"; "$PRODUCER" "$bus" --count 0 >/dev/null 2>&1 || true; rm -f "/dev/shm/shmbus.$bus"' EXIT
for _ in $(seq 200); do grep -q "serving bus" "$tmp/serve.err" && break; sleep 0.05; done
grep -q "serving bus" "$tmp/serve.err" || { echo "FAIL: --wait-for-bus: $(cat "$tmp/serve.err")"; exit 1; }
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
if [[ $rc -ne 0 ]] || ! grep -q '"subscribers":0' "$tmp/serve.err"; then
  echo "FAIL: SIGTERM: exit $rc, stderr: $(cat "$tmp/serve.err")"
  exit 1
fi
# An idle bridge prints no stats line until something changes; the summary
# at the end always comes.
"$BRIDGE" serve "$bus" --listen 127.0.0.1:0 --stats-interval 100ms 2>"$tmp/idle.err" &
pid=$!
sleep 1.2
kill -TERM "$pid"
wait "$pid" || true
if [[ $(grep -c "stats:" "$tmp/idle.err") -ne 1 ]]; then
  echo "FAIL: idle stats lines, want only the summary: $(cat "$tmp/idle.err")"
  exit 1
fi
echo "bridge cli: all cases passed"
