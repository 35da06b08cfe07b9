#!/usr/bin/env bash
# The programs as containers run them: sharing /dev/shm, each in a PID (and
# mount) namespace of its own, or without /proc. One case per ctest test:
#   PRODUCER=... CONSUMER=... INSPECT=... containers_test.sh CASE
# Needs root (or CAP_SYS_ADMIN) and util-linux unshare; skipped (exit 77,
# with the reason) where namespaces cannot be made.
set -euo pipefail

case_name=${1:?usage: containers_test.sh CASE}
: "${PRODUCER:?}" "${CONSUMER:?}" "${INSPECT:?}"

bus_prefix=ctr
work_prefix=shmbus-ctr
# shellcheck source=../lib/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/harness.sh"

N=300000
[[ -n "${SHMBUS_SANITIZE:-}" ]] && N=50000

# in_ns CMD...: CMD in a PID namespace (with its own /proc) of its own.
in_ns() { unshare --pid --fork --kill-child --mount-proc -- "$@"; }
# no_proc CMD...: CMD in a mount namespace without /proc.
no_proc() { unshare --mount --fork --kill-child -- /bin/sh -c 'umount -l /proc && exec "$0" "$@"' "$@"; }

if ! unshare --pid --mount --fork --kill-child -- /bin/sh -c 'umount -l /proc' 2>/dev/null; then
  echo "SKIP [$case_name]: cannot make PID and mount namespaces here (needs root or CAP_SYS_ADMIN, and util-linux unshare)" >&2
  exit 77
fi

# Sanitizer runtimes read /proc (options, memory map, leak check): sanitized
# programs are not run without it.
proc_optional=1
[[ -n "${SHMBUS_SANITIZE:-}" ]] && proc_optional=0

json_field() { grep -o "\"$2\": *[^,}]*" "$1" | head -n1 | cut -d: -f2- | tr -d '" '; }

check_verified() {  # check_verified FILE N
  local f=$1 n=$2
  [[ "$(json_field "$f" messages)" == "$n" ]] || fail "$f: messages != $n"
  [[ "$(json_field "$f" lost)" == "0" ]] || fail "$f: lost != 0"
  grep -q '"verify":{"gaps_reported_lost":0,"ok":true,"problems":0}' "$f" || fail "$f: not verified"
}

# wait_readers BUS N: until `show` counts N readers in use.
wait_readers() {
  local i
  for ((i = 0; i < 200; i++)); do
    [[ $("$INSPECT" show "$1" --interval 0 2>/dev/null) == *"($2 in use)"* ]] && return 0
    sleep 0.05
  done
  fail "never saw $2 reader(s) on $1"
}

# wait_reader_asleep BUS: until a reader of BUS sleeps in next() on it. A
# slot is "in use" from the moment a reader claims it, before it counts for
# the producer; one asleep on an empty bus has finished attaching.
wait_reader_asleep() {
  local i
  for ((i = 0; i < 200; i++)); do
    "$INSPECT" show "$1" --json --interval 0 2>/dev/null | grep -Eq '"sleeping": *true' && return 0
    sleep 0.05
  done
  fail "never saw a reader asleep on $1"
}

case $case_name in

reader_in_own_namespace)
  # Defaults everywhere but a small ring (the producer waits for the reader
  # over and over): the isolated verifying reader gets every message, and
  # the producer, waiting for it with --wait-for-readers, sees it.
  new_bus bus
  "$PRODUCER" "$bus" --create --capacity 1024 --count 0 --keep-open 2>/dev/null || fail "create"
  in_ns "$CONSUMER" "$bus" --verify --format none --json 2>"$work/ns.json" &
  pids+=($!)
  readers=1
  if ((proc_optional)); then
    no_proc "$CONSUMER" "$bus" --verify --format none --json 2>"$work/noproc.json" &
    pids+=($!)
    readers=2
  fi
  "$PRODUCER" "$bus" --count "$N" --wait-for-readers "$readers" --wait-timeout 20s 2>"$work/p.err" ||
    fail "producer: $(cat "$work/p.err")"
  wait "${pids[0]}" || fail "the isolated reader failed"
  check_verified "$work/ns.json" "$N"
  if ((proc_optional)); then
    wait "${pids[1]}" || fail "the reader without /proc failed"
    check_verified "$work/noproc.json" "$N"
  fi
  "$INSPECT" show "$bus" --json >"$work/show.json"
  [[ "$(json_field "$work/show.json" readers_reclaimed)" == "0" ]] || fail "a live reader was reclaimed"
  ;;

gc_and_rm_from_own_namespace)
  # gc and rm run in another namespace (or without /proc) judge the host's
  # live, stopped reader and producer by their locks: nothing is reclaimed
  # or removed, and the stopped reader then gets everything.
  new_bus bus
  "$PRODUCER" "$bus" --create --capacity 1024 --count 0 --keep-open 2>/dev/null || fail "create"
  "$CONSUMER" "$bus" --verify --format none --json --count "$N" 2>"$work/host.json" &
  reader=$!
  pids+=("$reader")
  wait_reader_asleep "$bus"  # attached: stopped now, it holds the producer
  kill -STOP "$reader"
  "$PRODUCER" "$bus" --count "$N" --keep-open 2>"$work/p.err" &
  producer=$!
  pids+=("$producer")
  sleep 0.3  # the producer fills the ring and waits for the stopped reader
  in_ns "$INSPECT" gc "$bus" >"$work/gc.out" 2>&1 || fail "gc: $(cat "$work/gc.out")"
  grep -q 'no dead readers' "$work/gc.out" || fail "gc in a namespace: $(cat "$work/gc.out")"
  expect_failure rm 'in use by' in_ns "$INSPECT" rm "$bus"
  if ((proc_optional)); then
    no_proc "$INSPECT" gc "$bus" >"$work/gc2.out" 2>&1 || fail "gc: $(cat "$work/gc2.out")"
    grep -q 'no dead readers' "$work/gc2.out" || fail "gc without /proc: $(cat "$work/gc2.out")"
    expect_failure rm_noproc 'in use by' no_proc "$INSPECT" rm "$bus"
  fi
  [[ -e /dev/shm/shmbus.$bus ]] || fail "removed a live bus"
  in_ns "$INSPECT" show "$bus" --json >"$work/show.json" || fail "show"
  grep -Eq '"liveness": *"alive"' "$work/show.json" || fail "show in a namespace: $(cat "$work/show.json")"
  kill -CONT "$reader"
  wait "$producer" || fail "producer: $(cat "$work/p.err")"
  wait "$reader" || fail "the host reader failed: $(cat "$work/host.json")"
  check_verified "$work/host.json" "$N"
  ;;

second_producer_from_own_namespace)
  # A second producer started in its own namespace while the first lives is
  # refused, naming the holder; the stream stays whole.
  new_bus bus
  "$PRODUCER" "$bus" --create --count 0 --keep-open 2>/dev/null || fail "create"
  "$CONSUMER" "$bus" --verify --format none --json --count "$N" 2>"$work/c.json" &
  pids+=($!)
  wait_readers "$bus" 1
  "$PRODUCER" "$bus" --count "$N" --rate 100000 2>"$work/p.err" &
  first=$!
  pids+=("$first")
  for _ in $(seq 100); do
    "$INSPECT" show "$bus" --json 2>/dev/null | grep -Eq '"attached": *true' && break
    sleep 0.02
  done
  expect_failure second 'another producer is attached \(pid [0-9]+ in another PID namespace\)' in_ns "$PRODUCER" "$bus" --count 10
  wait "$first" || fail "the first producer: $(cat "$work/p.err")"
  wait "${pids[0]}" || fail "the reader failed"
  check_verified "$work/c.json" "$N"
  ;;

evicted)
  # A stray store clears the live reader's slot state: the producer stops
  # waiting for it and laps it. The consumer says so in one line and exits
  # 1; with --follow it reads on, its loss counted.
  for follow in "" "--follow"; do
    new_bus bus
    "$PRODUCER" "$bus" --create --capacity 64 --count 0 --keep-open 2>/dev/null || fail "create"
    "$CONSUMER" "$bus" --format none --json $follow --idle-timeout 2s 2>"$work/c.json" &
    reader=$!
    pids+=("$reader")
    wait_readers "$bus" 1
    # Attached (its state word set) once it waits asleep for data.
    for _ in $(seq 200); do
      "$INSPECT" show "$bus" --interval 0 2>/dev/null | grep -q 'alive,asleep' && break
      sleep 0.02
    done
    # Reader slot 0's state word: header (512) + 8. Four zero bytes.
    printf '\0\0\0\0' | dd of="/dev/shm/shmbus.$bus" bs=1 seek=520 conv=notrunc status=none
    "$PRODUCER" "$bus" --count 1000 --wait-timeout 5s 2>"$work/p.err" || fail "producer: $(cat "$work/p.err")"
    rc=0
    wait "$reader" || rc=$?
    grep -q 'slot was taken from it' "$work/c.json" || fail "no eviction reported: $(cat "$work/c.json")"
    if [[ -z $follow ]]; then
      [[ $rc -eq 1 ]] || fail "exit $rc after an eviction, expected 1"
      grep -q '"code":"evicted"' "$work/c.json" || fail "no evicted code: $(cat "$work/c.json")"
    else
      [[ $rc -eq 0 ]] || fail "--follow: exit $rc after an eviction"
      [[ "$(json_field "$work/c.json" evictions)" == "1" ]] || fail "--follow: $(cat "$work/c.json")"
      lost=$(json_field "$work/c.json" lost)
      got=$(json_field "$work/c.json" messages)
      [[ $((lost + got)) -eq 1000 ]] || fail "--follow: $got messages + $lost lost != 1000"
    fi
  done
  ;;

*)
  fail "unknown case"
  ;;
esac
