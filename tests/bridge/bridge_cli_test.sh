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

"$BRIDGE" serve b --listen 127.0.0.1:0 --json --stats-interval 0 2>"$tmp/serve.err" &
pid=$!
for _ in $(seq 100); do grep -q "serving bus" "$tmp/serve.err" && break; sleep 0.05; done
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
if [[ $rc -ne 0 ]] || ! grep -q '"subscribers":0' "$tmp/serve.err"; then
  echo "FAIL: SIGTERM: exit $rc, stderr: $(cat "$tmp/serve.err")"
  exit 1
fi
echo "bridge cli: all cases passed"
