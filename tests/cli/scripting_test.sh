#!/usr/bin/env bash
# End-to-end tests of what scripts rely on in every shmbus program: exit
# codes, JSON errors, one spelling per value, --version, messages that say
# what is true. One case per ctest test:
#   PRODUCER=... CONSUMER=... INSPECT=... BENCH=... scripting_test.sh CASE
# BENCH may be empty (benchmarks not built). Needs bash, coreutils and grep.
set -euo pipefail

case_name=${1:?usage: scripting_test.sh CASE}
: "${PRODUCER:?set PRODUCER to the shmbus-producer binary}"
: "${CONSUMER:?set CONSUMER to the shmbus-consumer binary}"
: "${INSPECT:?set INSPECT to the shmbus-inspect binary}"
BENCH=${BENCH:-}

bus_prefix=cli
work_prefix=shmbus-scripting
# shellcheck source=../lib/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/harness.sh"

# expect_rc WANT NAME CMD...: CMD exits with status WANT; its stdout and
# stderr are kept as NAME.out and NAME.err.
expect_rc() {
  local want=$1 name=$2
  shift 2
  local rc=0
  "$@" >"$work/$name.out" 2>"$work/$name.err" </dev/null || rc=$?
  [[ $rc -eq $want ]] || fail "$name: exit $rc, want $want: $(cat "$work/$name.err")"
}

# expect_json_error FILE CODE REGEX: FILE is exactly one line, a JSON error
# object with "code":"CODE" and an "error" matching REGEX.
expect_json_error() {
  local f=$1 code=$2 regex=$3
  [[ "$(wc -l <"$f")" -eq 1 ]] || fail "$f: not one line: $(cat "$f")"
  grep -Eq '^\{"program":"shmbus-[a-z]+","error":".*","code":"'"$code"'"\}$' "$f" ||
    fail "$f: not a JSON error with code $code: $(cat "$f")"
  grep -Eq -- "\"error\":\"$regex" "$f" || fail "$f: error does not match /$regex/: $(cat "$f")"
}

# record_length_offset BUS SEQ: byte offset of record SEQ's length field
# (layout.hpp: log_offset is the u64 at byte 48 of the header; a record's
# length is the u32 at byte 16 of its record).
record_length_offset() {
  local seg="/dev/shm/shmbus.$1" log_offset record_size capacity
  log_offset=$(od -An -tu8 -j48 -N8 "$seg" | tr -d ' ')
  record_size=$(od -An -tu4 -j16 -N4 "$seg" | tr -d ' ')
  capacity=$(od -An -tu8 -j24 -N8 "$seg" | tr -d ' ')
  echo $((log_offset + ($2 % capacity) * record_size + 16))
}

case "$case_name" in

exit_codes)  # docs/programs.md "Exit codes": 0, 1, 2 and 128+N, in every program
  new_bus bus
  # 0: success
  printf 'a\n' | "$PRODUCER" "$bus" --create --keep-open 2>/dev/null || fail "producer: not 0"
  expect_rc 0 consumer_ok "$CONSUMER" "$bus" --count 1
  expect_rc 0 inspect_ok "$INSPECT" show "$bus" --interval 0
  # 1: runtime failures
  new_bus missing
  expect_rc 1 producer_missing "$PRODUCER" "$missing"
  expect_rc 1 consumer_missing "$CONSUMER" "$missing"
  expect_rc 1 inspect_missing "$INSPECT" show "$missing"
  # 2: every bad command line, including options the library refuses
  expect_rc 2 producer_capacity "$PRODUCER" "$missing" --create --capacity 1000
  grep -q "^shmbus-producer: bus '$missing': capacity 1000 is not a power of two" "$work/producer_capacity.err" ||
    fail "capacity: $(cat "$work/producer_capacity.err")"
  [[ ! -e "/dev/shm/shmbus.$missing" ]] || fail "a refused --create left a segment"
  expect_rc 2 producer_bad_name "$PRODUCER" "a/b" --create
  expect_rc 2 consumer_bad_flag "$CONSUMER" "$bus" --bogus
  expect_rc 2 consumer_resume_unnamed "$CONSUMER" "$bus" --from resume
  expect_rc 2 inspect_bad_flag "$INSPECT" show "$bus" --bogus
  expect_rc 2 inspect_no_subcommand "$INSPECT"
  for f in producer_capacity producer_bad_name consumer_bad_flag consumer_resume_unnamed inspect_bad_flag inspect_no_subcommand; do
    [[ "$(wc -l <"$work/$f.err")" -eq 1 ]] || fail "$f: not one line: $(cat "$work/$f.err")"
    grep -q '^shmbus-[a-z]*: ' "$work/$f.err" || fail "$f: not prefixed: $(cat "$work/$f.err")"
  done
  if [[ -n "$BENCH" ]]; then
    expect_rc 0 bench_version "$BENCH" --version
    expect_rc 2 bench_bad_flag "$BENCH" --bogus
    expect_rc 2 bench_bad_mode "$BENCH" --modes sideways
    grep -q "^shmbus-bench: unknown mode 'sideways'" "$work/bench_bad_mode.err" || fail "$(cat "$work/bench_bad_mode.err")"
  fi
  # 128+N: a second signal ends a program at once. Both arrive while it is
  # stopped, so the second finds the first still being handled.
  new_bus sig
  mkfifo "$work/in"
  exec 3<>"$work/in"
  "$PRODUCER" "$sig" --create <"$work/in" 2>/dev/null &
  ppid=$!
  pids+=($ppid)
  echo x >&3
  # Once "x" is readable the producer has published, so its handlers are set.
  [[ "$(timeout 10 "$CONSUMER" "$sig" --wait-for-bus 5s --count 1 2>/dev/null)" == x ]] || fail "producer did not publish"
  kill -STOP "$ppid"
  kill -INT "$ppid"
  kill -TERM "$ppid"
  kill -CONT "$ppid"
  rc=0
  wait "$ppid" || rc=$?
  exec 3>&-
  [[ $rc -eq 130 || $rc -eq 143 ]] || fail "two signals: exit $rc, want 130 or 143"
  note "two signals: exit $rc"
  ;;

json_errors)  # with --json, a failure is one JSON object with "error" and "code"
  new_bus bus
  expect_rc 1 consumer_missing "$CONSUMER" "$bus" --json
  expect_json_error "$work/consumer_missing.err" not_found "bus '$bus'"
  [[ ! -s "$work/consumer_missing.out" ]] || fail "consumer wrote a JSON error to stdout"
  expect_rc 2 producer_capacity "$PRODUCER" "$bus" --create --capacity 1000 --json
  expect_json_error "$work/producer_capacity.err" invalid_options "bus '$bus': capacity 1000"
  expect_rc 2 consumer_usage "$CONSUMER" "$bus" --json --format xml
  expect_json_error "$work/consumer_usage.err" usage "--format"
  # shmbus-inspect writes its JSON on stdout, and so its JSON errors.
  expect_rc 1 inspect_missing "$INSPECT" show "$bus" --json
  expect_json_error "$work/inspect_missing.out" not_found "bus '$bus'"
  [[ ! -s "$work/inspect_missing.err" ]] || fail "inspect --json also wrote: $(cat "$work/inspect_missing.err")"
  expect_rc 2 inspect_usage "$INSPECT" show --json
  expect_json_error "$work/inspect_usage.out" usage ".*bus.*required"
  # A producer failing mid-run: its JSON summary carries the error and code.
  "$PRODUCER" "$bus" --create --capacity 8 --record-size 64 --keep-open </dev/null 2>/dev/null
  rc=0
  printf 'ok\n%s\n' "$(printf 'x%.0s' {1..233})" | "$PRODUCER" "$bus" --json 2>"$work/long.err" || rc=$?
  [[ $rc -eq 1 ]] || fail "too long: exit $rc"
  [[ "$(wc -l <"$work/long.err")" -eq 1 ]] || fail "too long: more than the JSON summary: $(cat "$work/long.err")"
  grep -q '"code":"too_large"' "$work/long.err" || fail "$(cat "$work/long.err")"
  grep -q '"error":"bus '"'$bus'"': line 2 of stdin is 233 bytes' "$work/long.err" || fail "$(cat "$work/long.err")"
  grep -q '"messages":1' "$work/long.err" || fail "$(cat "$work/long.err")"
  ;;

corrupt_exit)  # a consumer that skipped a corrupt record exits 1, even without --verify
  new_bus bus
  printf 'a\nb\nc\n' | "$PRODUCER" "$bus" --create --record-size 64 2>/dev/null
  printf '\xa0\x0f\x00\x00' | dd of="/dev/shm/shmbus.$bus" bs=1 seek="$(record_length_offset "$bus" 1)" \
    conv=notrunc status=none  # record 1 claims 4000 bytes
  expect_rc 1 corrupt "$CONSUMER" "$bus"
  [[ "$(cat "$work/corrupt.out")" == $'a\nc' ]] || fail "delivered: $(cat "$work/corrupt.out")"
  grep -q "2 messages, 0 lost.*; 1 corrupt record skipped" "$work/corrupt.err" || fail "$(cat "$work/corrupt.err")"
  expect_rc 1 corrupt_json "$CONSUMER" "$bus" --json --format none
  grep -q '"corrupt":1' "$work/corrupt_json.err" || fail "$(cat "$work/corrupt_json.err")"
  grep -q '"code":"corrupt"' "$work/corrupt_json.err" || fail "$(cat "$work/corrupt_json.err")"
  ;;

consistency)  # one spelling per value, --version, unknown names named, plurals
  for p in "$PRODUCER" "$CONSUMER" "$INSPECT" ${BENCH:+"$BENCH"}; do
    v=$("$p" --version) || fail "$p --version failed"
    [[ "$v" =~ ^shmbus-[a-z]+\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "$p --version: $v"
  done
  # busy-spin is the one spelling; busy_spin is refused by every program.
  new_bus bus
  "$PRODUCER" "$bus" --create --keep-open --wait busy-spin </dev/null 2>/dev/null || fail "busy-spin refused"
  expect_failure producer_underscore "^shmbus-producer: --wait: 'busy_spin' is not one of adaptive, spin-yield, busy-spin" \
    "$PRODUCER" "$bus" --wait busy_spin
  expect_failure consumer_underscore "^shmbus-consumer: --wait: 'spin_yield'" "$CONSUMER" "$bus" --wait spin_yield
  if [[ -n "$BENCH" ]]; then
    expect_failure bench_underscore "^shmbus-bench: --wait: 'busy_spin'" "$BENCH" --wait busy_spin
    # Into a file first: grep -q stops reading at the match, and under
    # pipefail the SIGPIPE that then ends the writer fails the pipeline.
    "$BENCH" --help >"$work/bench_help"
    grep -q "adaptive, spin-yield, busy-spin" "$work/bench_help" || fail "bench --help spells the strategies otherwise"
  fi
  expect_failure unknown_subcommand "^shmbus-inspect: unknown subcommand 'shw' \(did you mean 'show'\?\)" "$INSPECT" shw "$bus"
  [[ $LAST_RC -eq 2 ]] || fail "unknown subcommand: exit $LAST_RC"
  expect_failure rate_zero "^shmbus-producer: --rate: must be a positive number, not '0' \(see --help\)$" \
    "$PRODUCER" "$bus" --count 5 --rate 0
  expect_failure near_miss "^shmbus-consumer: unknown option '--fromat' \(did you mean '--format'\?\)" \
    "$CONSUMER" "$bus" --fromat json
  expect_failure near_miss_inspect "^shmbus-inspect: unknown option '--intervl' \(did you mean '--interval'\?\)" \
    "$INSPECT" show "$bus" --intervl 1s
  # Plurals: one message is "1 message", one wait "1 time".
  new_bus one
  printf 'x\n' | "$PRODUCER" "$one" --create 2>"$work/p1.err"
  grep -q "bus '$one': 1 message, 1 byte in" "$work/p1.err" || fail "$(cat "$work/p1.err")"
  grep -Eq "\(0 times\)|\(1 time\)|\([2-9][0-9]* times\)" "$work/p1.err" || fail "$(cat "$work/p1.err")"
  "$CONSUMER" "$one" >/dev/null 2>"$work/c1.err"
  grep -q "bus '$one': 1 message, 0 lost" "$work/c1.err" || fail "$(cat "$work/c1.err")"
  new_bus slot
  "$PRODUCER" "$slot" --create --max-readers 1 --keep-open </dev/null 2>/dev/null
  "$INSPECT" show "$slot" --interval 0 | grep -q ", 1 reader slot (0 in use)$" || fail "$("$INSPECT" show "$slot" --interval 0)"
  expect_failure one_reader "^shmbus-producer: bus '$slot': timed out waiting for 1 reader \(0 attached\)$" \
    "$PRODUCER" "$slot" --count 1 --wait-for-readers 1 --wait-timeout 100ms
  ;;

truthful)  # messages that say what is true
  new_bus bus
  seq 0 9 | "$PRODUCER" "$bus" --create --capacity 64 --record-size 64 --keep-open 2>/dev/null
  # --from past the head is in the future, not "no longer retained".
  expect_failure from_future "^shmbus-consumer: bus '$bus': --from 99999999 is in the future: the newest message is seq 9 \(the next one published will be seq 10\)$" \
    "$CONSUMER" "$bus" --from 99999999
  grep -q "not retained" "$work/from_future.err" && fail "future start called not retained"
  # ... while one that was overwritten is no longer retained.
  new_bus gone
  seq 0 99 | "$PRODUCER" "$gone" --create --capacity 64 --record-size 64 --keep-open 2>/dev/null
  expect_failure from_gone "^shmbus-consumer: bus '$gone': sequence 0 is not retained \(the bus holds 36\.\.99\)$" \
    "$CONSUMER" "$gone" --from 0
  # --stats of messages that are not synthetic says why it has no samples.
  "$CONSUMER" "$bus" --stats --count 10 --format none 2>"$work/stats_text.err" || fail "--stats of text lines: $(cat "$work/stats_text.err")"
  grep -q "^shmbus-consumer: bus '$bus': latency: no samples: 10 of 10 messages are not synthetic (--stats times the messages of shmbus-producer --count)$" \
    "$work/stats_text.err" || fail "--stats without samples: $(cat "$work/stats_text.err")"
  # --verify from a late start says where it began.
  new_bus late
  "$PRODUCER" "$late" --create --capacity 64 --record-size 64 --count 100 --size 32 --keep-open 2>/dev/null
  "$CONSUMER" "$late" --verify --count 64 --format none 2>"$work/late.err" || fail "late --verify: $(cat "$work/late.err")"
  grep -q "; seq 36\.\.99; verified OK from seq 36, where this reader started (no gaps, no duplicates, checksums match)$" \
    "$work/late.err" || fail "late --verify: $(cat "$work/late.err")"
  # A name longer than the 31 bytes a reader slot holds is refused, not cut.
  expect_failure long_name "^shmbus-consumer: --name: '$(printf 'n%.0s' {1..32})' is 32 bytes; reader names hold at most 31" \
    "$CONSUMER" "$bus" --name "$(printf 'n%.0s' {1..32})"
  [[ $LAST_RC -eq 2 ]] || fail "long name: exit $LAST_RC"
  "$CONSUMER" "$bus" --name "$(printf 'n%.0s' {1..31})" --count 1 >/dev/null 2>&1 || fail "a 31-byte name was refused"
  # --wait-timeout names the reader that holds the ring full.
  mkfifo "$work/stall"
  exec 3<>"$work/stall"
  "$CONSUMER" "$bus" --name laggard --format hex >"$work/stall" 2>/dev/null &
  lag=$!
  pids+=($lag)
  until "$INSPECT" show "$bus" --interval 0 --json | grep -q '"name":"laggard"'; do sleep 0.05; done
  rc=0
  "$PRODUCER" "$bus" --count 100000 --size 32 --wait-timeout 300ms 2>"$work/full.err" || rc=$?
  [[ $rc -eq 1 ]] || fail "full ring: exit $rc"
  grep -Eq "^shmbus-producer: bus '$bus': the ring stayed full for 300 ms \(--wait-timeout\): reader [0-9]+ 'laggard' \(pid $lag\) is [0-9]+ messages behind and not reading; gave up after [0-9]+ messages$" \
    "$work/full.err" || fail "$(cat "$work/full.err")"
  note "$(cat "$work/full.err")"
  exec 3>&-
  ;;

*)
  echo "unknown case: $case_name" >&2
  exit 2
  ;;
esac
note "ok"
