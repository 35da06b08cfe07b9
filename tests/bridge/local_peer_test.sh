#!/usr/bin/env bash
# shmbus-bridge serve and subscribers on the same host: a local subscriber
# is served only if its user may read the bus's segment, whatever address
# it comes from, and with a token as well when one is set.
#   BRIDGE=... PRODUCER=... CONSUMER=... local_peer_test.sh
# Runs the consumer as `nobody` (65534) with setpriv; needs root, and is
# skipped (exit 77, with the reason) otherwise.
set -euo pipefail
: "${BRIDGE:?}" "${PRODUCER:?}" "${CONSUMER:?}"
case_name=local_peer
bus_prefix=bridge
work_prefix=shmbus-bridge-local
# shellcheck source=../lib/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/harness.sh"
# shellcheck source=serve_port.sh
source "$(dirname "${BASH_SOURCE[0]}")/serve_port.sh"

if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP [$case_name]: needs root to own the bus and run a subscriber as another user" >&2
  exit 77
fi
if ! command -v setpriv >/dev/null; then
  echo "SKIP [$case_name]: setpriv (util-linux) is not installed" >&2
  exit 77
fi
OTHER_UID=65534
as_other() { setpriv --reuid="$OTHER_UID" --regid="$OTHER_UID" --clear-groups --reset-env -- "$@"; }
# The consumer, copied where the other user may run it whatever the build
# directory's permissions.
chmod 0755 "$work"
cp "$CONSUMER" "$work/consumer"
chmod 0755 "$work/consumer"
consumer=$work/consumer
as_other "$consumer" --version >/dev/null 2>&1 || {
  echo "SKIP [$case_name]: uid $OTHER_UID cannot run programs from $work" >&2
  exit 77
}

new_bus bus
"$PRODUCER" "$bus" --create --count 5 --keep-open 2>"$work/producer.err" || fail "producer"
[[ $(stat -c '%u %a' "/dev/shm/shmbus.$bus") == "0 600" ]] || fail "the bus is not root's 0600"

# serve_on VAR ADDRESS [ARGS...]: starts a server, sets VAR to its port.
serve_on() {
  local var=$1 addr=$2
  shift 2
  local log="$work/serve-${#pids[@]}.err"
  "$BRIDGE" serve "$bus" --listen "$addr:0" --stats-interval 0 "$@" 2>"$log" &
  pids+=($!)
  local p
  p=$(serve_port "$log" "$bus") || fail "serve on $addr did not start: $(cat "$log")"
  printf -v "$var" '%s' "$p"
  SERVE_LOG=$log
}

serve_on port 127.0.0.1
log=$SERVE_LOG

# Another local user may not read root's 0600 bus through the bridge.
expect_failure other 'forbidden: local peer uid 65534.* may not read bus .*owner uid 0' \
  as_other "$consumer" "tcp://127.0.0.1:$port/$bus" --count 1 --format none
grep -q "closed: forbidden: local peer uid $OTHER_UID" "$log" || fail "the server did not log the refusal"
[[ $(grep -c "closed: forbidden" "$log") -eq 1 ]] || fail "the refusal is not one log line"
# The owner is served.
"$consumer" "tcp://127.0.0.1:$port/$bus" --from earliest --count 5 >"$work/owner.out" 2>"$work/owner.err" ||
  fail "the owner was not served: $(cat "$work/owner.err")"
[[ $(wc -l <"$work/owner.out") -eq 5 ]] || fail "the owner got $(wc -l <"$work/owner.out") messages, not 5"

# Read access for others (o+r) lets the other user in; a group it is not in does not.
chmod 0604 "/dev/shm/shmbus.$bus"
as_other "$consumer" "tcp://127.0.0.1:$port/$bus" --from earliest --count 5 >"$work/other.out" 2>"$work/other.err" ||
  fail "o+r: the other user was not served: $(cat "$work/other.err")"
[[ $(wc -l <"$work/other.out") -eq 5 ]] || fail "o+r: the other user got $(wc -l <"$work/other.out") messages"
chmod 0640 "/dev/shm/shmbus.$bus"
expect_failure group 'forbidden' as_other "$consumer" "tcp://127.0.0.1:$port/$bus" --count 1 --format none
chmod 0600 "/dev/shm/shmbus.$bus"

# A non-loopback address of this host is local too; the token is required as well.
addr=$(ip -4 -o addr show scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
if [[ -n "$addr" ]]; then
  printf 'sesame\n' >"$work/token"
  chmod 0644 "$work/token"
  serve_on port2 "$addr" --token-file "$work/token"
  expect_failure other_host_address 'forbidden: local peer uid 65534' \
    as_other "$consumer" "tcp://$addr:$port2/$bus" --token-file "$work/token" --count 1 --format none
  expect_failure owner_without_token 'bad-token' "$consumer" "tcp://$addr:$port2/$bus" --count 1 --format none
  "$consumer" "tcp://$addr:$port2/$bus" --token-file "$work/token" --from earliest --count 5 \
    >"$work/owner2.out" 2>"$work/owner2.err" || fail "the owner with the token was not served: $(cat "$work/owner2.err")"
else
  note "no global IPv4 address: the non-loopback case is not run"
fi
echo "bridge local peer: all cases passed"
