#!/usr/bin/env bash
# End-to-end tests of shmbus-producer and shmbus-consumer, driving the real
# binaries as separate processes. One case per ctest test:
#   PRODUCER=... CONSUMER=... cli_test.sh CASE
# SHMBUS_SANITIZE non-empty scales the big runs down (1,000,000 -> 100,000).
# Needs only bash, coreutils and grep.
set -euo pipefail

case_name=${1:?usage: cli_test.sh CASE}
: "${PRODUCER:?set PRODUCER to the shmbus-producer binary}"
: "${CONSUMER:?set CONSUMER to the shmbus-consumer binary}"

BIG=1000000
MID=200000
if [[ -n "${SHMBUS_SANITIZE:-}" ]]; then
  BIG=100000
  MID=50000
fi

bus_prefix=cli
work_prefix=shmbus-cli
# shellcheck source=../lib/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/harness.sh"

# json_field FILE KEY: the number/bool/string value of "KEY" in a one-line JSON summary.
json_field() {
  grep -o "\"$2\":[^,}]*" "$1" | head -n1 | cut -d: -f2- | tr -d '"'
}

wait_for_file() {  # wait_for_file PATH SECONDS
  local i
  for ((i = 0; i < $2 * 100; i++)); do
    [[ -e "$1" ]] && return 0
    sleep 0.01
  done
  return 1
}

# The consumer summary in FILE says N messages, verified, no lost (block).
check_verified() {  # check_verified FILE N
  local f=$1 n=$2
  [[ "$(json_field "$f" messages)" == "$n" ]] || fail "$f: messages != $n"
  [[ "$(json_field "$f" lost)" == "0" ]] || fail "$f: lost != 0"
  grep -q '"verify":{"gaps_reported_lost":0,"ok":true,"problems":0}' "$f" || fail "$f: not verified"
  [[ "$(json_field "$f" first_seq)" == "0" ]] || fail "$f: first_seq != 0"
}

case "$case_name" in

help)
  "$PRODUCER" --help >"$work/p.out"
  grep -q -- "--count" "$work/p.out" || fail "producer --help lacks --count"
  "$CONSUMER" --help >"$work/c.out"
  grep -q -- "--verify" "$work/c.out" || fail "consumer --help lacks --verify"
  ;;

lines)  # lines from stdin reach a consumer in order; summaries on stderr, stdout clean
  new_bus bus
  printf 'a\nb\nc\n' | "$PRODUCER" "$bus" --create >"$work/p.out" 2>"$work/p.err"
  [[ ! -s "$work/p.out" ]] || fail "producer wrote to stdout"
  grep -q "3 messages" "$work/p.err" || fail "producer summary lacks '3 messages'"
  "$CONSUMER" "$bus" --from earliest --count 3 >"$work/c.out" 2>"$work/c.err"
  [[ "$(cat "$work/c.out")" == $'a\nb\nc' ]] || fail "consumer printed: $(cat "$work/c.out")"
  grep -q "3 messages" "$work/c.err" || fail "consumer summary lacks '3 messages'"
  note "$(cat "$work/p.err")"
  note "$(cat "$work/c.err")"
  # Without --count it stops at the end-of-stream the producer marked.
  timeout 10 "$CONSUMER" "$bus" >"$work/c2.out" 2>"$work/c2.err" || fail "consumer to end-of-stream failed"
  [[ "$(cat "$work/c2.out")" == $'a\nb\nc' ]] || fail "second consumer printed: $(cat "$work/c2.out")"
  grep -q "stopped by closed" "$work/c2.err" || fail "not stopped by the producer's close"
  ;;

formats)
  new_bus bus
  printf 'hi\n\n"q"\tx\n\xff\x01\n' | "$PRODUCER" "$bus" --create --json 2>"$work/p.json"
  grep -q '"messages":4' "$work/p.json" || fail "producer json: $(cat "$work/p.json")"
  grep -q '"end_of_stream":true' "$work/p.json" || fail "producer json lacks end_of_stream"
  "$CONSUMER" "$bus" --format hex >"$work/hex.out" 2>/dev/null
  [[ "$(cat "$work/hex.out")" == $'0 6869\n1 \n2 2271220978\n3 ff01' ]] || fail "hex: $(cat "$work/hex.out")"
  "$CONSUMER" "$bus" --format json --json >"$work/json.out" 2>"$work/c.json"
  # One shape for every message: seq, timestamp_ns, length, encoding, payload.
  grep -q '^{"seq":0,"timestamp_ns":[0-9]*,"length":2,"encoding":"utf8","payload":"hi"}$' "$work/json.out" || fail "json line 0: $(cat "$work/json.out")"
  grep -q '^{"seq":2,.*"encoding":"utf8","payload":"\\"q\\"\\tx"}$' "$work/json.out" || fail "json escaping: $(cat "$work/json.out")"
  grep -q '^{"seq":3,"timestamp_ns":[0-9]*,"length":2,"encoding":"hex","payload":"ff01"}$' "$work/json.out" || fail "json binary: $(cat "$work/json.out")"
  [[ "$(json_field "$work/c.json" messages)" == 4 ]] || fail "consumer json: $(cat "$work/c.json")"
  [[ "$(wc -l <"$work/c.json")" == 1 ]] || fail "consumer json summary is not one line"
  "$CONSUMER" "$bus" --format none >"$work/none.out" 2>/dev/null
  [[ ! -s "$work/none.out" ]] || fail "--format none wrote to stdout"
  ;;

file_binary)
  new_bus bus
  printf 'one\ntwo\nthree' >"$work/lines.txt"  # no final newline
  "$PRODUCER" "$bus" --create --file "$work/lines.txt" 2>/dev/null
  [[ "$("$CONSUMER" "$bus" 2>/dev/null)" == $'one\ntwo\nthree' ]] || fail "--file lines"
  new_bus bus2
  printf '\x03\x00\x00\x00abc\x00\x00\x00\x00\x02\x00\x00\x00\n\n' >"$work/frames.bin"
  "$PRODUCER" "$bus2" --create --binary --file "$work/frames.bin" 2>/dev/null
  [[ "$("$CONSUMER" "$bus2" --format hex 2>/dev/null)" == $'0 616263\n1 \n2 0a0a' ]] || fail "--binary frames"
  new_bus bus3
  printf '\x05\x00\x00\x00ab' >"$work/short.bin"
  rc=0
  "$PRODUCER" "$bus3" --create --binary --file "$work/short.bin" --json 2>"$work/trunc.err" || rc=$?
  [[ $rc -eq 1 ]] || fail "truncated frame: rc=$rc"
  # With --json, only the JSON summary of what was published before it, with the reason.
  [[ "$(wc -l <"$work/trunc.err")" -eq 1 ]] || fail "truncated frame: not one JSON line: $(cat "$work/trunc.err")"
  grep -q "\"error\":\"bus '$bus3': input ends inside frame 1" "$work/trunc.err" || fail "truncated frame json"
  grep -q '"code":"truncated_input"' "$work/trunc.err" || fail "truncated frame code"
  rc=0
  "$PRODUCER" "$bus3" --binary --file "$work/short.bin" 2>"$work/trunc_text.err" || rc=$?
  [[ $rc -eq 1 ]] || fail "truncated frame (text): rc=$rc"
  # Without --json: the one-line reason, then the summary.
  head -n1 "$work/trunc_text.err" | grep -q "^shmbus-producer: bus '$bus3': input ends inside frame 1" || fail "truncated frame"
  expect_failure missing_file "bus '$bus3'.*cannot open" "$PRODUCER" "$bus3" --file "$work/nope.txt"
  ;;

from)
  new_bus bus
  printf 'a\nb\nc\nd\ne\n' | "$PRODUCER" "$bus" --create --keep-open 2>/dev/null
  [[ "$("$CONSUMER" "$bus" --from 2 --count 3 2>/dev/null)" == $'c\nd\ne' ]] || fail "--from 2"
  # --from latest sees only what is published after it attached.
  "$CONSUMER" "$bus" --from latest --count 2 >"$work/latest.out" 2>"$work/latest.err" &
  pids+=($!)
  sleep 0.5
  printf 'f\ng\n' | "$PRODUCER" "$bus" 2>/dev/null
  wait "${pids[-1]}" || fail "--from latest consumer failed"
  [[ "$(cat "$work/latest.out")" == $'f\ng' ]] || fail "--from latest printed: $(cat "$work/latest.out")"
  grep -q "seq 5..6" "$work/latest.err" || fail "sequence did not continue after --keep-open: $(cat "$work/latest.err")"
  ;;

million)  # a million synthetic messages verified between two processes, with latency figures
  new_bus bus
  "$PRODUCER" "$bus" --create --capacity 65536 --record-size 256 </dev/null 2>/dev/null --keep-open
  "$CONSUMER" "$bus" --from earliest --verify --stats --format none --json \
    >"$work/c.out" 2>"$work/c.json" &
  cpid=$!
  pids+=($cpid)
  "$PRODUCER" "$bus" --count "$BIG" --size 128 --wait-for-readers 1 --wait-timeout 20s \
    2>"$work/p.err" || fail "producer failed"
  wait "$cpid" || fail "consumer failed"
  check_verified "$work/c.json" "$BIG"
  for k in p50 p90 p99 p99_9 max; do
    [[ "$(json_field "$work/c.json" "$k")" =~ ^[0-9]+$ ]] || fail "latency $k missing"
  done
  [[ ! -s "$work/c.out" ]] || fail "--format none wrote to stdout"
  note "$(cat "$work/p.err")"
  note "$(cat "$work/c.json")"
  ;;

million_text)  # the same, with the human summary: throughput and percentiles
  new_bus bus
  n=$MID
  "$CONSUMER" "$bus" --wait-for-bus 10s --verify --stats --format none >"$work/c.out" 2>"$work/c.err" &
  cpid=$!
  pids+=($cpid)
  "$PRODUCER" "$bus" --create --capacity 65536 --record-size 256 --count "$n" --size 128 \
    --wait-for-readers 1 --wait-timeout 20s 2>"$work/p.err" || fail "producer failed"
  wait "$cpid" || fail "consumer failed"
  grep -q "$n messages, 0 lost" "$work/c.err" || fail "consumer summary"
  grep -q "verified OK (no gaps" "$work/c.err" || fail "not verified"
  grep -Eq "latency us: p50 [0-9.]+  p90 [0-9.]+  p99 [0-9.]+  p99.9 [0-9.]+  max [0-9.]+" "$work/c.err" || fail "no percentiles"
  grep -Eq "msgs/s" "$work/p.err" || fail "producer summary lacks msgs/s"
  grep -Eq "waited for space [0-9.]+ s" "$work/p.err" || fail "producer summary lacks wait time"
  note "$(cat "$work/p.err")"
  note "$(cat "$work/c.err")"
  ;;

four_consumers)  # four named consumers each verify every message of one producer
  new_bus bus
  n=$MID
  for i in 1 2 3 4; do
    "$CONSUMER" "$bus" --wait-for-bus 10s --name "c$i" --verify --format none --json \
      >/dev/null 2>"$work/c$i.json" &
    pids+=($!)
  done
  "$PRODUCER" "$bus" --create --capacity 4096 --count "$n" --size 64 --wait-for-readers 4 \
    --wait-timeout 20s 2>"$work/p.err" || fail "producer failed"
  for i in 1 2 3 4; do
    wait "${pids[$((i - 1))]}" || fail "consumer $i failed"
    check_verified "$work/c$i.json" "$n"
  done
  note "$(cat "$work/p.err")"
  ;;

sigkill_consumer)  # a consumer killed with SIGKILL while it holds the producer back frees it
  new_bus bus
  n=$MID
  "$PRODUCER" "$bus" --create --capacity 1024 --record-size 128 --keep-open </dev/null 2>/dev/null
  # The victim writes hex into a pipe nobody reads: it stalls as soon as the
  # pipe is full and holds the producer back until it is killed.
  mkfifo "$work/stall"
  exec 3<>"$work/stall"
  "$CONSUMER" "$bus" --name victim --format hex >"$work/stall" 2>/dev/null &
  victim=$!
  pids+=($victim)
  for i in 1 2; do
    "$CONSUMER" "$bus" --name "c$i" --verify --format none --json >/dev/null 2>"$work/c$i.json" &
    pids+=($!)
  done
  "$PRODUCER" "$bus" --count "$n" --size 64 --wait-for-readers 3 --wait-timeout 30s \
    --json 2>"$work/p.json" &
  ppid=$!
  pids+=($ppid)
  sleep 1
  kill -0 "$ppid" 2>/dev/null || fail "producer finished before the victim was killed (not held back)"
  kill -9 "$victim"
  note "killed consumer $victim"
  wait "$ppid" || fail "producer did not finish after the consumer was killed"
  for i in 1 2; do
    wait "${pids[$i]}" || fail "consumer $i failed"
    check_verified "$work/c$i.json" "$n"
  done
  grep -Eq '"waits_for_space":[1-9]' "$work/p.json" || fail "producer never waited for space"
  note "$(cat "$work/p.json")"
  exec 3>&-
  ;;

hold_limit)  # --max-hold: a stopped reader that holds the producer is let go, named, told its loss
  new_bus bus
  n=$MID
  "$PRODUCER" "$bus" --create --capacity 1024 --record-size 128 --keep-open </dev/null 2>/dev/null
  "$CONSUMER" "$bus" --name stuck --verify --format none --json >/dev/null 2>"$work/stuck.err" &
  stuck=$!
  pids+=($stuck)
  "$CONSUMER" "$bus" --name logger --verify --format none --json >/dev/null 2>"$work/logger.json" &
  logger=$!
  pids+=($logger)
  # Stopped once attached, before anything is published (a stopped reader
  # still counts for --wait-for-readers: it is alive). Attached means asleep
  # on the empty bus: a slot shows its name from the moment it is claimed,
  # before the reader counts for the producer.
  until "$INSPECT" show "$bus" --interval 0 --json | grep -Eq '"name":"stuck"[^}]*"sleeping":true'; do sleep 0.05; done
  kill -STOP "$stuck"
  "$PRODUCER" "$bus" --count "$n" --size 64 --wait-for-readers 2 --wait-timeout 60s --max-hold 500ms \
    --json 2>"$work/p.json" || fail "producer did not finish: the stopped reader was never let go"
  "$INSPECT" show "$bus" --interval 0 >"$work/show.txt"
  grep -Eq 'stuck .*let-go@[0-9:]+' "$work/show.txt" || fail "show does not mark the stopped reader let go"
  grep -q 'readers let go 1' "$work/show.txt" || fail "show does not count one reader let go"
  grep -q "reader .*'stuck'.* was let go at" "$work/show.txt" || fail "show has no warning naming who was let go"
  "$INSPECT" show "$bus" --interval 0 --json >"$work/show.json"
  grep -q '"readers_let_go":1,' "$work/show.json" || fail "show --json: readers_let_go != 1"
  grep -Eq '"let_go_ns":[1-9]' "$work/show.json" || fail "show --json: no reader with let_go_ns"
  note "$(grep -i 'let' "$work/show.txt")"
  kill -CONT "$stuck"
  wait "$logger" || fail "the reader that kept reading failed"
  check_verified "$work/logger.json" "$n"
  wait "$stuck" || fail "the reader let go failed its verification"
  grep -q "this reader was let go (the producer.s hold limit ran out" "$work/stuck.err" || fail "the reader let go was not told"
  tail -n1 "$work/stuck.err" >"$work/stuck.json"
  [[ "$(json_field "$work/stuck.json" let_go)" == "true" ]] || fail "summary lacks let_go"
  lost=$(json_field "$work/stuck.json" lost)
  messages=$(json_field "$work/stuck.json" messages)
  ((lost > 0)) || fail "the reader let go was never lapped"
  ((lost + messages == n)) || fail "delivered $messages + lost $lost != $n"
  grep -q '"ok":true' "$work/stuck.json" || fail "the reader let go did not verify (every gap reported lost)"
  ;;

let_go)  # shmbus-inspect let-go: a producer with no hold limit, blocked on a stopped reader, goes on
  new_bus bus
  n=$MID
  "$PRODUCER" "$bus" --create --capacity 1024 --record-size 64 --keep-open </dev/null 2>/dev/null
  "$CONSUMER" "$bus" --name stuck --verify --format none --json >/dev/null 2>"$work/stuck.err" &
  stuck=$!
  pids+=($stuck)
  until "$INSPECT" show "$bus" --interval 0 --json | grep -Eq '"name":"stuck"[^}]*"sleeping":true'; do sleep 0.05; done
  kill -STOP "$stuck"
  # Mixed sizes, 1 record to many: the loss the reader is told must still add up.
  "$PRODUCER" "$bus" --count "$n" --size 24..2000 --json 2>"$work/p.json" &
  producer=$!
  pids+=($producer)
  until "$INSPECT" show "$bus" --interval 0 --json | grep -q '"waiting_for_space":true'; do sleep 0.05; done
  sleep 0.3
  # The wait under way is named with its length everywhere a producer is shown.
  "$INSPECT" show "$bus" --interval 0 >"$work/blocked.txt"
  grep -Eq "producer +pid $producer alive, waiting for space for [0-9.]+m?s \(held back by reader 0 'stuck'\)" \
    "$work/blocked.txt" || fail "show does not name the wait under way: $(cat "$work/blocked.txt")"
  grep -Eq "producer waits 1 \([0-9.]+u?s ended, [0-9.]+m?s so far in the one under way\)" "$work/blocked.txt" ||
    fail "the counters hide the wait under way: $(grep counters "$work/blocked.txt")"
  grep -Eq "fill .*unread by the slowest reader that holds the producer \([0-9.]+%\)" "$work/blocked.txt" ||
    fail "fill: $(grep fill "$work/blocked.txt")"
  "$INSPECT" show "$bus" --interval 0 --json | grep -Eq '"waiting_ns":[1-9][0-9]{7,}' || fail "show --json: no waiting_ns"
  "$INSPECT" watch "$bus" --interval 100ms --count 1 | grep -Eq "producer $producer alive blocked [0-9.]+m?s on 0 " ||
    fail "watch does not show the wait: $("$INSPECT" watch "$bus" --interval 100ms --count 1)"
  "$INSPECT" let-go "$bus" --reader stuck >"$work/let_go.txt" || fail "let-go failed"
  grep -q "^bus '$bus': let reader 0 'stuck' (pid $stuck) go: it no longer holds the producer" "$work/let_go.txt" ||
    fail "let-go said: $(cat "$work/let_go.txt")"
  grep -q "was waiting for it and can continue" "$work/let_go.txt" || fail "let-go does not say the producer goes on"
  wait "$producer" || fail "the producer did not finish after let-go"
  "$INSPECT" show "$bus" --interval 0 >"$work/show.txt"
  grep -Eq 'stuck .*let-go@[0-9:]+' "$work/show.txt" || fail "show does not mark the reader let go"
  grep -q "fill .*no reader holds the producer (1 best-effort, let go or evicted)" "$work/show.txt" ||
    fail "fill counts a reader let go: $(grep fill "$work/show.txt")"
  "$INSPECT" watch "$bus" --interval 100ms --count 1 | grep -Eq "0 stuck stopped,let-go@[0-9:]+ " ||
    fail "watch does not flag the reader let go"
  # It holds nobody now: a second let-go is refused, one line, exit 1.
  expect_failure again "reader 0 'stuck' .* does not hold the producer: it was let go at" \
    "$INSPECT" let-go "$bus" --reader 0
  [[ $LAST_RC -eq 1 ]] || fail "again: exit $LAST_RC, not 1"
  "$INSPECT" let-go "$bus" --reader stuck --json >"$work/again.json" && fail "let-go --json of a reader let go exited 0"
  grep -q '"code":"refused"' "$work/again.json" || fail "let-go --json: $(cat "$work/again.json")"
  expect_failure nobody "no reader named 'nobody' is attached" "$INSPECT" let-go "$bus" --reader nobody
  kill -CONT "$stuck"
  wait "$stuck" || fail "the reader let go failed its verification: $(cat "$work/stuck.err")"
  grep -q "this reader was let go (the producer's hold limit ran out while it waited for it, or shmbus-inspect let-go)" \
    "$work/stuck.err" || fail "the reader let go was not told: $(cat "$work/stuck.err")"
  tail -n1 "$work/stuck.err" >"$work/stuck.json"
  lost=$(json_field "$work/stuck.json" lost)
  messages=$(json_field "$work/stuck.json" messages)
  ((lost > 0)) || fail "the reader let go was never lapped"
  grep -q '"ok":true' "$work/stuck.json" || fail "the reader let go did not verify (every gap reported lost)"
  note "let go: $messages messages, $lost sequences lost"
  ;;

start_order)  # --wait-for-bus / --wait-for-readers: message 0 is seen in either order
  new_bus bus
  "$CONSUMER" "$bus" --wait-for-bus --verify --json --format none >/dev/null 2>"$work/c1.json" &
  pids+=($!)
  sleep 0.3
  "$PRODUCER" "$bus" --create --capacity 64 --count 5000 --size 32 --wait-for-readers 1 \
    --wait-timeout 10s 2>/dev/null || fail "producer (consumer first) failed"
  wait "${pids[-1]}" || fail "consumer (started first) failed"
  check_verified "$work/c1.json" 5000
  new_bus bus2
  "$PRODUCER" "$bus2" --create --capacity 64 --count 5000 --size 32 --wait-for-readers 1 \
    --wait-timeout 10s 2>/dev/null &
  ppid=$!
  pids+=($ppid)
  sleep 0.5
  "$CONSUMER" "$bus2" --verify --json --format none >/dev/null 2>"$work/c2.json" || fail "consumer (started second) failed"
  wait "$ppid" || fail "producer (started first) failed"
  check_verified "$work/c2.json" 5000
  ;;

overwrite_lost)  # overwrite bus: losses are reported, counted, and accepted by --verify
  new_bus bus
  n=$MID
  "$CONSUMER" "$bus" --wait-for-bus 10s --verify --format hex --json 2>"$work/c.json" \
    | { sleep 1; cat >/dev/null; } &
  pids+=($!)
  "$PRODUCER" "$bus" --create --policy overwrite --capacity 64 --count "$n" --size 32 \
    --wait-for-readers 1 --wait-timeout 10s 2>"$work/p.err" || fail "producer failed"
  wait "${pids[-1]}" || fail "consumer failed (verify did not accept reported losses?)"
  grep '"report":"summary"' "$work/c.json" >"$work/summary.json" || fail "no summary: $(cat "$work/c.json")"
  lost=$(json_field "$work/summary.json" lost)
  msgs=$(json_field "$work/summary.json" messages)
  [[ "$lost" -gt 0 ]] || fail "no loss reported on a stalled overwrite consumer"
  [[ $((lost + msgs)) -eq $n ]] || fail "messages $msgs + lost $lost != $n"
  grep -q '"ok":true' "$work/summary.json" || fail "verify failed: $(cat "$work/summary.json")"
  # Each loss was told as it happened (at most a line a second, the rest
  # summed into the next): the lines add up to the summary's count, and the
  # last one's running total is it.
  grep '"report":"lost"' "$work/c.json" >"$work/lost.json" || fail "no loss told before the summary"
  told=0
  while read -r line; do
    told=$((told + $(grep -o '"lost":[0-9]*' <<<"$line" | cut -d: -f2)))
    first=$(grep -o '"first_seq":[0-9]*' <<<"$line" | cut -d: -f2)
    last=$(grep -o '"last_seq":[0-9]*' <<<"$line" | cut -d: -f2)
    ((last >= first)) || fail "a loss line from $first to $last: $line"
  done <"$work/lost.json"
  ((told == lost)) || fail "the loss lines add up to $told, the summary says $lost"
  [[ "$(tail -n1 "$work/lost.json" | grep -o '"lost_in_all":[0-9]*' | cut -d: -f2)" == "$lost" ]] ||
    fail "the last loss line's lost_in_all is not $lost: $(tail -n1 "$work/lost.json")"
  note "$(wc -l <"$work/lost.json") loss lines; $(cat "$work/summary.json")"
  # Without --json: the same as text, one line each.
  new_bus text_bus
  "$PRODUCER" "$text_bus" --create --policy overwrite --capacity 64 --keep-open </dev/null 2>/dev/null
  "$CONSUMER" "$text_bus" --format none --idle-timeout 2s 2>"$work/c.err" &
  pids+=($!)
  until "$INSPECT" show "$text_bus" --interval 0 --json | grep -q '"sleeping":true'; do sleep 0.05; done
  kill -STOP "${pids[-1]}"
  "$PRODUCER" "$text_bus" --count 1000 --size 24..300 2>/dev/null
  kill -CONT "${pids[-1]}"
  wait "${pids[-1]}" || fail "text consumer failed: $(cat "$work/c.err")"
  grep -Eq "^shmbus-consumer: bus '$text_bus': lost seq [0-9]+\.\.[0-9]+ \([0-9]+ sequences\); [0-9]+ lost in all$" "$work/c.err" ||
    fail "no text loss line: $(cat "$work/c.err")"
  ;;

verify_catches)  # --verify fails on non-synthetic and on corrupted messages
  new_bus bus
  printf 'x\n' | "$PRODUCER" "$bus" --create 2>/dev/null
  rc=0
  "$CONSUMER" "$bus" --verify --format none 2>"$work/short.err" || rc=$?
  [[ $rc -eq 1 ]] || fail "verify of a text line: rc=$rc"
  grep -q "shorter than a synthetic" "$work/short.err" || fail "$(cat "$work/short.err")"
  # Take one real synthetic message, flip one filler byte, publish it as a frame.
  new_bus bus2
  "$PRODUCER" "$bus2" --create --count 1 --size 40 2>/dev/null
  hex=$("$CONSUMER" "$bus2" --format hex 2>/dev/null | cut -d' ' -f2)
  [[ ${#hex} -eq 80 ]] || fail "hex dump of a 40-byte message: $hex"
  to_frame() {  # hex payload -> u32 LE length + bytes
    printf '\x28\x00\x00\x00'
    printf "$(sed 's/../\\x&/g' <<<"$1")"
  }
  new_bus bus3
  to_frame "$hex" | "$PRODUCER" "$bus3" --create --binary 2>/dev/null
  "$CONSUMER" "$bus3" --verify --format none 2>"$work/good.err" || fail "an intact copy did not verify: $(cat "$work/good.err")"
  flipped="${hex:0:70}$(printf '%02x' $(((0x${hex:70:2}) ^ 0x10)))${hex:72}"
  new_bus bus4
  to_frame "$flipped" | "$PRODUCER" "$bus4" --create --binary 2>/dev/null
  rc=0
  "$CONSUMER" "$bus4" --verify --format none 2>"$work/bad.err" || rc=$?
  [[ $rc -eq 1 ]] || fail "corrupted message verified: rc=$rc"
  grep -q "is corrupt: byte 35 differs from the filler of seq 0" "$work/bad.err" || fail "$(cat "$work/bad.err")"
  note "$(head -n1 "$work/bad.err")"
  # --count N that the stream does not reach fails --verify.
  rc=0
  "$CONSUMER" "$bus2" --verify --count 5 --format none 2>"$work/count.err" || rc=$?
  [[ $rc -eq 1 ]] && grep -q "after 1 of 5" "$work/count.err" || fail "short stream: $(cat "$work/count.err")"
  ;;

signals)  # SIGINT/SIGTERM stop the consumer cleanly and free its reader slot
  new_bus bus
  "$PRODUCER" "$bus" --create --max-readers 1 --keep-open </dev/null 2>/dev/null
  for sig in INT TERM; do
    "$CONSUMER" "$bus" >/dev/null 2>"$work/sig$sig.err" &
    cpid=$!
    pids+=($cpid)
    sleep 0.3
    start=$(date +%s%N)
    kill -s "$sig" "$cpid"
    rc=0
    wait "$cpid" || rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    [[ $rc -eq 0 ]] || fail "SIG$sig: rc=$rc"
    [[ $ms -lt 1000 ]] || fail "SIG$sig: took $ms ms to stop"
    grep -q "stopped by signal" "$work/sig$sig.err" || fail "SIG$sig: $(cat "$work/sig$sig.err")"
    note "SIG$sig stopped the consumer in $ms ms"
  done
  # The only reader slot was released: another consumer attaches at once.
  "$CONSUMER" "$bus" --idle-timeout 100ms 2>/dev/null || fail "slot not released"
  # A producer stopped by SIGINT marks end-of-stream: its consumer drains and ends.
  new_bus bus2
  "$CONSUMER" "$bus2" --wait-for-bus 10s --verify --format none --json >/dev/null 2>"$work/c.json" &
  cpid=$!
  pids+=($cpid)
  "$PRODUCER" "$bus2" --create --count 100000000 --size 32 --rate 2000 --wait-for-readers 1 \
    2>"$work/p.err" &
  ppid=$!
  pids+=($ppid)
  sleep 0.5
  kill -INT "$ppid"
  wait "$ppid" || fail "producer stopped by SIGINT: non-zero exit"
  grep -q "end-of-stream marked" "$work/p.err" || fail "$(cat "$work/p.err")"
  timeout 5 tail --pid="$cpid" -f /dev/null || fail "consumer did not see end-of-stream"
  wait "$cpid" || fail "consumer of the interrupted producer failed: $(cat "$work/c.json")"
  grep -q '"stopped_by":"closed"' "$work/c.json" || fail "$(cat "$work/c.json")"
  ;;

signals_every_wait)  # SIGINT and SIGTERM end every program in every one of its waits, with its summary
  # stops_within NAME SIG MS PID ERRFILE REGEX: PID, signalled, exits 0 (or
  # with a one-line error for a wait that published nothing) within MS, and
  # its stderr matches REGEX.
  stops_within() {
    local name=$1 sig=$2 ms=$3 pid=$4 err=$5 regex=$6 rc=0 t0 took
    t0=$(date +%s%N)
    kill -s "$sig" "$pid"
    wait "$pid" || rc=$?
    took=$((($(date +%s%N) - t0) / 1000000))
    [[ $rc -lt 128 ]] || fail "$name SIG$sig: killed (rc $rc), not stopped"
    [[ $took -lt $ms ]] || fail "$name SIG$sig: took $took ms to stop"
    grep -Eq -- "$regex" "$err" || fail "$name SIG$sig: stderr does not match /$regex/: $(cat "$err")"
    note "$name: SIG$sig stopped it in $took ms (rc $rc)"
  }
  for sig in INT TERM; do
    # A producer waiting for space: its only reader stopped, the ring full.
    new_bus bus
    "$PRODUCER" "$bus" --create --capacity 64 --count 100000000 --size 32 --wait-for-readers 1 \
      2>"$work/space$sig.err" &
    ppid=$!
    pids+=($ppid)
    "$CONSUMER" "$bus" --wait-for-bus 5s --format none 2>"$work/spacec$sig.err" &
    cpid=$!
    pids+=($cpid)
    for _ in $(seq 100); do grep -q "waiting for space" <("$INSPECT" show "$bus" 2>/dev/null) && break; sleep 0.05; done
    kill -STOP "$cpid"
    sleep 0.3
    "$INSPECT" show "$bus" | grep -q "waiting for space" || fail "the producer is not waiting for space"
    stops_within "producer waiting for space" "$sig" 1000 "$ppid" "$work/space$sig.err" "end-of-stream marked"
    kill -CONT "$cpid"
    wait "$cpid" || fail "the consumer of a producer stopped while waiting for space failed: $(cat "$work/spacec$sig.err")"
    # A producer waiting for readers: a one-line error, and the bus it created is gone.
    new_bus bus
    "$PRODUCER" "$bus" --create --count 10 --wait-for-readers 2 2>"$work/readers$sig.err" &
    ppid=$!
    pids+=($ppid)
    wait_for_file "/dev/shm/shmbus.$bus" 5 || fail "no bus"
    sleep 0.2
    stops_within "producer waiting for readers" "$sig" 1000 "$ppid" "$work/readers$sig.err" "interrupted while waiting for 2 readers"
    [[ ! -e "/dev/shm/shmbus.$bus" ]] || fail "a bus created by a producer interrupted while waiting for readers is left"
    # A consumer waiting for a bus that does not exist yet.
    new_bus bus
    "$CONSUMER" "$bus" --wait-for-bus 60s 2>"$work/bus$sig.err" &
    cpid=$!
    pids+=($cpid)
    sleep 0.3
    stops_within "consumer waiting for a bus" "$sig" 1000 "$cpid" "$work/bus$sig.err" "signal|interrupted"
    if [[ -n "${BRIDGE:-}" ]]; then
      # shmbus-bridge serve, idle; a tcp:// consumer reconnecting with back-off; mirror reconnecting.
      new_bus bus
      "$PRODUCER" "$bus" --create --keep-open </dev/null 2>/dev/null
      port=$((20000 + RANDOM % 20000))
      "$BRIDGE" serve "$bus" --listen "127.0.0.1:$port" 2>"$work/serve$sig.err" &
      spid=$!
      pids+=($spid)
      sleep 0.5
      dead=$((20000 + RANDOM % 20000))
      "$CONSUMER" "tcp://127.0.0.1:$port/$bus" --follow --format none 2>"$work/tcp$sig.err" &
      tpid=$!
      pids+=($tpid)
      sleep 0.3
      stops_within "bridge serve" "$sig" 1000 "$spid" "$work/serve$sig.err" "stats: subscribers="
      sleep 0.5  # the tcp:// consumer is reconnecting now
      stops_within "tcp:// consumer reconnecting" "$sig" 1000 "$tpid" "$work/tcp$sig.err" "signal"
      new_bus mbus
      "$BRIDGE" mirror --connect "127.0.0.1:$dead" --remote-bus "$bus" --bus "$mbus" 2>"$work/mirror$sig.err" &
      mpid=$!
      pids+=($mpid)
      sleep 0.7
      stops_within "bridge mirror reconnecting" "$sig" 1000 "$mpid" "$work/mirror$sig.err" "stats: connected=0"
    fi
    if [[ -n "${NATS:-}" ]] && command -v nats-server >/dev/null; then
      # The gateway reconnecting: out and in, connected and moving data,
      # then the server killed under them.
      nport=$((20000 + RANDOM % 20000))
      mkdir -p "$work/js$sig"
      nats-server -js -sd "$work/js$sig" -a 127.0.0.1 -p "$nport" >"$work/server$sig.log" 2>&1 &
      nspid=$!
      pids+=($nspid)
      for _ in $(seq 100); do grep -q "Server is ready" "$work/server$sig.log" && break; sleep 0.05; done
      new_bus nbus
      new_bus nbus_in
      "$PRODUCER" "$nbus" --create --keep-open </dev/null 2>/dev/null
      "$NATS" out "$nbus" --server "nats://127.0.0.1:$nport" --stream "S$sig" --create-stream 2>"$work/nout$sig.err" &
      opid=$!
      pids+=($opid)
      sleep 0.5  # out creates the stream before in needs it
      "$NATS" in "$nbus_in" --server "nats://127.0.0.1:$nport" --stream "S$sig" --durable d 2>"$work/nin$sig.err" &
      ipid=$!
      pids+=($ipid)
      "$PRODUCER" "$nbus" --count 100000000 --size 100 --rate 20000 2>/dev/null &
      ppid=$!
      pids+=($ppid)
      sleep 1
      kill -9 "$nspid"
      sleep 0.7
      stops_within "nats out reconnecting" "$sig" 1000 "$opid" "$work/nout$sig.err" "out: published="
      stops_within "nats in reconnecting" "$sig" 1000 "$ipid" "$work/nin$sig.err" "in: received="
      kill "$ppid"
    fi
  done
  ;;

idle_timeout)
  new_bus bus
  "$PRODUCER" "$bus" --create --keep-open </dev/null 2>/dev/null
  start=$(date +%s%N)
  "$CONSUMER" "$bus" --idle-timeout 300ms 2>"$work/c.err" || fail "idle consumer failed"
  ms=$((($(date +%s%N) - start) / 1000000))
  [[ $ms -ge 250 && $ms -lt 2000 ]] || fail "--idle-timeout 300ms took $ms ms"
  grep -q "stopped by idle_timeout" "$work/c.err" || fail "$(cat "$work/c.err")"
  ;;

rate)
  new_bus bus
  start=$(date +%s%N)
  "$PRODUCER" "$bus" --create --count 300 --size 32 --rate 1000 2>"$work/p.err" || fail "producer"
  ms=$((($(date +%s%N) - start) / 1000000))
  [[ $ms -ge 280 && $ms -lt 3000 ]] || fail "300 messages at 1000/s took $ms ms"
  grep -Eq "300 messages.* 0\.(29|3[0-9])[0-9] s" "$work/p.err" || fail "paced time: $(cat "$work/p.err")"
  "$CONSUMER" "$bus" --verify --format none 2>/dev/null || fail "paced messages do not verify"
  note "$(cat "$work/p.err")"
  ;;

errors_missing_bus)
  new_bus bus
  expect_failure consumer_missing "^shmbus-consumer: bus '$bus':.*(not exist|not found|no such)" "$CONSUMER" "$bus"
  expect_failure producer_missing "^shmbus-producer: bus '$bus':.*(not exist|not found|no such).*--create" "$PRODUCER" "$bus"
  start=$(date +%s%N)
  expect_failure wait_for_bus_timeout "^shmbus-consumer: bus '$bus': does not exist \(waited 300 ms\)" \
    "$CONSUMER" "$bus" --wait-for-bus 300ms
  ms=$((($(date +%s%N) - start) / 1000000))
  [[ $ms -ge 280 ]] || fail "--wait-for-bus 300ms gave up after $ms ms"
  ;;

errors_version)
  new_bus bus
  "$PRODUCER" "$bus" --create --keep-open </dev/null 2>/dev/null
  # layout_version is the u32 at byte 8 of the segment header (libshmbus/src/layout.hpp).
  printf '\x63\x00\x00\x00' | dd of="/dev/shm/shmbus.$bus" bs=1 seek=8 conv=notrunc status=none
  expect_failure consumer_version "^shmbus-consumer: bus '$bus':.*version" "$CONSUMER" "$bus"
  expect_failure producer_version "^shmbus-producer: bus '$bus':.*version" "$PRODUCER" "$bus"
  ;;

errors_second_producer)
  new_bus bus
  mkfifo "$work/in"
  "$PRODUCER" "$bus" --create <"$work/in" 2>"$work/first.err" &
  first=$!
  pids+=($first)
  exec 3>"$work/in"
  echo x >&3
  # Once "x" is readable the first producer holds the role.
  [[ "$(timeout 10 "$CONSUMER" "$bus" --wait-for-bus 5s --count 1 2>/dev/null)" == x ]] || fail "first producer did not publish"
  expect_failure second_producer "^shmbus-producer: bus '$bus':.*\b$first\b" "$PRODUCER" "$bus"
  exec 3>&-
  wait "$first" || fail "first producer failed: $(cat "$work/first.err")"
  ;;

errors_too_long)
  new_bus bus
  # 8 records of 64 bytes: a message takes at most 4 of them, 4 x 64 - 24 = 232 bytes
  "$PRODUCER" "$bus" --create --capacity 8 --record-size 64 --keep-open </dev/null 2>/dev/null
  long=$(printf 'x%.0s' {1..233})
  rc=0
  printf 'ok\n%s\n' "$long" | "$PRODUCER" "$bus" >"$work/long.out" 2>"$work/long.err" || rc=$?
  [[ $rc -ne 0 ]] || fail "a 233-byte line on a bus of 232-byte messages was accepted"
  grep -q "^shmbus-producer: bus '$bus': line 2 of stdin is 233 bytes, longer than the bus's max message of 232 bytes (capacity 8, record size 64" \
    "$work/long.err" || fail "$(cat "$work/long.err")"
  note "$(head -n1 "$work/long.err")"
  # The failed run leaves the bus open (no end-of-stream for its consumers).
  [[ "$("$CONSUMER" "$bus" --idle-timeout 300ms 2>"$work/c.err")" == ok ]] || fail "the line before the long one was not published"
  grep -q "stopped by idle_timeout" "$work/c.err" || fail "the failed producer ended the stream: $(cat "$work/c.err")"
  expect_failure size_too_long "^shmbus-producer: bus '$bus': --size 233 is longer than the bus's max message of 232 bytes" \
    "$PRODUCER" "$bus" --count 1 --size 233
  expect_failure size_mix_too_long "^shmbus-producer: bus '$bus': --size 300 is longer than the bus's max message of 232 bytes" \
    "$PRODUCER" "$bus" --count 1 --size 24..300
  # Past one record's payload (40 bytes) is fine: the message spans records.
  printf '%s\n' "${long:0:232}" | "$PRODUCER" "$bus" --keep-open 2>"$work/fits.err" || fail "a 232-byte line: $(cat "$work/fits.err")"
  expect_failure size_too_short "^shmbus-producer: bus '$bus': --size 23 is below .* 24 bytes" \
    "$PRODUCER" "$bus" --count 1 --size 23
  ;;

max_message)  # --max-message and `shmbus-inspect size`: a bus sized from its largest message takes it
  new_bus bus
  # 16,384 records of 128 bytes are 2 MiB, yet take 1 MiB less 24 bytes:
  # --capacity that small is refused, naming the one that takes it.
  expect_failure capacity_too_small "--capacity 16384 with --record-size 128 takes messages of at most 1048552 bytes, not --max-message 1048576: use --capacity 32768" \
    "$PRODUCER" "$bus" --create --record-size 128 --capacity 16384 --max-message 1MiB --count 1
  [[ $LAST_RC -eq 2 ]] || fail "capacity_too_small: exit $LAST_RC, not 2"
  [[ ! -e "/dev/shm/shmbus.$bus" ]] || fail "a refused --create left a bus"
  # Without --capacity the ring is made to take it; a 1 MiB message goes through.
  "$PRODUCER" "$bus" --create --record-size 128 --max-message 1MiB --count 2 --size 1048576 --keep-open 2>"$work/p.err" ||
    fail "--max-message 1MiB: $(cat "$work/p.err")"
  "$INSPECT" show "$bus" --interval 0 --json >"$work/show.json"
  grep -q '"capacity":32768' "$work/show.json" || fail "not 32768 records: $(cat "$work/show.json")"
  # An existing bus that would not take it is refused before anything is published.
  expect_failure existing_too_small "takes messages of at most 2097128 bytes \(capacity 32768, record size 128\), not --max-message 3145728; a bus that does needs --capacity 65536" \
    "$PRODUCER" "$bus" --max-message 3MiB --count 1
  [[ $LAST_RC -eq 1 ]] || fail "existing_too_small: exit $LAST_RC, not 1"
  expect_failure bad_size "--max-message '1 XB' is not a byte count" "$PRODUCER" "$bus" --max-message "1 XB" --count 1
  # The sizing helper: its first line is the options, and a bus made with them takes the message.
  "$INSPECT" size --max-message 1MiB --message 100 >"$work/size.txt"
  [[ "$(head -n1 "$work/size.txt")" == "--record-size 128 --capacity 32768" ]] || fail "size: $(cat "$work/size.txt")"
  "$INSPECT" size --max-message 4MiB --message 100 --retain 2s@50000/s --json >"$work/size.json"
  grep -q '"record_size":128,"capacity":131072,"max_message":8388584' "$work/size.json" || fail "size --json: $(cat "$work/size.json")"
  "$INSPECT" size --message 100 --retain 1000000 --json | grep -q '"capacity":1048576.*"decided_by":"retain"' ||
    fail "size --retain 1000000 does not decide the capacity"
  new_bus sized
  # shellcheck disable=SC2046  # the options are two words each
  "$PRODUCER" "$sized" --create $("$INSPECT" size --max-message 300000 --message 64 | head -n1) --count 1 --size 300000 2>"$work/sized.err" ||
    fail "a bus made from size's options refused its max message: $(cat "$work/sized.err")"
  expect_failure size_too_large "no bus takes a message of 2147483648 bytes" "$INSPECT" size --max-message 2GiB
  [[ $LAST_RC -eq 2 ]] || fail "size_too_large: exit $LAST_RC, not 2"
  ;;

oversize)  # --oversize error|skip|truncate
  new_bus bus
  "$PRODUCER" "$bus" --create --capacity 8 --record-size 64 --keep-open </dev/null 2>/dev/null
  long=$(printf 'y%.0s' {1..300})  # the bus takes 232 bytes at most
  printf 'a\n%s\nb\n%s\nc\n' "$long" "$long" | "$PRODUCER" "$bus" --oversize skip --keep-open 2>"$work/skip.err" \
    || fail "--oversize skip failed: $(cat "$work/skip.err")"
  grep -q "3 messages.*2 oversized lines skipped" "$work/skip.err" || fail "skip summary: $(cat "$work/skip.err")"
  printf '%s\nd\n' "$long" | "$PRODUCER" "$bus" --oversize truncate --json 2>"$work/trunc.json" \
    || fail "--oversize truncate failed"
  [[ "$(json_field "$work/trunc.json" oversize_truncated)" == 1 ]] || fail "truncate json: $(cat "$work/trunc.json")"
  "$CONSUMER" "$bus" >"$work/out" 2>/dev/null
  [[ "$(cat "$work/out")" == "$(printf 'a\nb\nc\n%s\nd' "${long:0:232}")" ]] || fail "skip/truncate delivered: $(cat "$work/out")"
  # Frames too: a 300-byte frame between two small ones.
  new_bus bus2
  { printf '\x01\x00\x00\x00A'; printf '\x2c\x01\x00\x00'; printf 'z%.0s' {1..300}; printf '\x01\x00\x00\x00B'; } >"$work/f.bin"
  "$PRODUCER" "$bus2" --create --capacity 8 --record-size 64 --binary --oversize skip --file "$work/f.bin" 2>"$work/fs.err" \
    || fail "frames skip: $(cat "$work/fs.err")"
  [[ "$("$CONSUMER" "$bus2" 2>/dev/null)" == $'A\nB' ]] || fail "frames skip delivered the wrong messages"
  grep -q "1 oversized frame skipped" "$work/fs.err" || fail "$(cat "$work/fs.err")"
  ;;

binary_out)  # --format binary round-trips --binary; text escapes control bytes
  new_bus bus
  head -c 100000 /dev/urandom >"$work/rand"
  # Frames of 0..200 random bytes each.
  python3 - "$work/rand" "$work/f" <<'PY'
import struct, sys
data = open(sys.argv[1], 'rb').read()
out = open(sys.argv[2], 'wb')
i = n = 0
while i < len(data) and n < 2000:
    k = (n * 37) % 201
    out.write(struct.pack('<I', len(data[i:i + k])) + data[i:i + k])
    i += k
    n += 1
PY
  "$PRODUCER" "$bus" --create --binary --file "$work/f" 2>/dev/null
  "$CONSUMER" "$bus" --format binary >"$work/g" 2>"$work/c.err"
  cmp "$work/f" "$work/g" || fail "binary frames in != binary frames out"
  new_bus bus2
  printf 'bell\x07 esc\x1b[31m cr\r bs\\ tab\tend\n' | "$PRODUCER" "$bus2" --create 2>/dev/null
  "$CONSUMER" "$bus2" >"$work/t" 2>/dev/null
  [[ "$(cat "$work/t")" == 'bell\x07 esc\e[31m cr\r bs\\ tab'$'\t''end' ]] || fail "text escaping: $(cat -A "$work/t")"
  ;;

rate_input)  # --rate paces stdin/--file input too
  new_bus bus
  seq 1 20 >"$work/in"
  start=$(date +%s%N)
  "$PRODUCER" "$bus" --create --file "$work/in" --rate 100 2>"$work/p.err" || fail "$(cat "$work/p.err")"
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  # 20 messages on a 100/s schedule: the last is due 190 ms after the first.
  ((elapsed_ms >= 180)) || fail "20 lines at --rate 100 took only $elapsed_ms ms"
  grep -q "20 messages" "$work/p.err" || fail "$(cat "$work/p.err")"
  note "20 lines at --rate 100: $elapsed_ms ms"
  ;;

resume)  # named readers resume where they stopped
  new_bus bus
  seq 0 1999 | "$PRODUCER" "$bus" --create --keep-open 2>/dev/null
  "$CONSUMER" "$bus" --name archiver --count 1001 --json >"$work/a1" 2>"$work/a1.json"
  [[ "$(tail -n1 "$work/a1")" == 1000 ]] || fail "first run ended at $(tail -n1 "$work/a1")"
  "$CONSUMER" "$bus" --name archiver --count 999 --json >"$work/a2" 2>"$work/a2.json"
  [[ "$(json_field "$work/a2.json" first_seq)" == 1001 ]] || fail "resumed at: $(cat "$work/a2.json")"
  grep -q '"resumed":true' "$work/a2.json" || fail "$(cat "$work/a2.json")"
  [[ "$(head -n1 "$work/a2")" == 1001 ]] || fail "resume delivered $(head -n1 "$work/a2") first"
  # Stopped by SIGINT: the next run carries on exactly after the last message printed.
  "$CONSUMER" "$bus" --name tailer --from 1500 >"$work/t1" 2>"$work/t1.err" &
  tpid=$!
  pids+=($tpid)
  for ((i = 0; i < 500; i++)); do [[ $(wc -l <"$work/t1") -ge 500 ]] && break; sleep 0.01; done
  kill -INT "$tpid"
  wait "$tpid" || fail "tailer exit after SIGINT: $(cat "$work/t1.err")"
  seq 2000 2009 | "$PRODUCER" "$bus" --keep-open 2>/dev/null
  "$CONSUMER" "$bus" --name tailer --count 10 >"$work/t2" 2>/dev/null
  [[ "$(head -n1 "$work/t2")" == 2000 ]] || fail "after SIGINT, resumed at $(head -n1 "$work/t2")"
  # A live holder: the second attach fails naming its pid.
  "$CONSUMER" "$bus" --name archiver --format none >/dev/null 2>&1 &
  hpid=$!
  pids+=($hpid)
  for ((i = 0; i < 300; i++)); do
    grep -q 'archiver' <("$INSPECT" show "$bus" --json 2>/dev/null) && break
    sleep 0.01
  done
  expect_failure held "reader name 'archiver' is held by a live reader \(pid $hpid\)" \
    "$CONSUMER" "$bus" --name archiver
  kill -INT "$hpid"
  wait "$hpid" || true
  # The inspector lists remembered names; gc --forget drops one.
  "$INSPECT" show "$bus" >"$work/show" 2>&1
  grep -Eq '^ +archiver +2010 +0 +-' "$work/show" || fail "show: $(cat "$work/show")"
  grep -Eq '^ +tailer +2010 ' "$work/show" || fail "show: $(cat "$work/show")"
  "$INSPECT" gc "$bus" --forget tailer >"$work/gc" 2>&1 || fail "gc --forget: $(cat "$work/gc")"
  grep -q "forgot reader name 'tailer'" "$work/gc" || fail "$(cat "$work/gc")"
  "$INSPECT" show "$bus" --json >"$work/show.json"
  grep -q '"tailer"' "$work/show.json" && fail "tailer still remembered"
  "$CONSUMER" "$bus" --name tailer --count 1 >"$work/t3" 2>"$work/t3.err"
  [[ "$(cat "$work/t3")" == 0 ]] || fail "a forgotten name started at $(cat "$work/t3")"
  grep -q "reader 'tailer' is new" "$work/t3.err" || fail "$(cat "$work/t3.err")"
  ;;

resume_gone)  # a bookmark no longer retained reports exactly how much is gone
  new_bus bus
  seq 0 9 | "$PRODUCER" "$bus" --create --capacity 16 --policy overwrite --keep-open 2>/dev/null
  "$CONSUMER" "$bus" --name slow --count 5 >/dev/null 2>&1
  seq 10 39 | "$PRODUCER" "$bus" --keep-open 2>/dev/null
  # Its bookmark is at 5; the ring now holds 24..39: 19 messages are gone.
  "$CONSUMER" "$bus" --name slow --count 16 --json >"$work/out" 2>"$work/c.err"
  grep -q "reader 'slow': 19 messages after where it stopped are no longer retained; resuming at seq 24" \
    "$work/c.err" || fail "$(cat "$work/c.err")"
  grep -q '"lost":19' "$work/c.err" || fail "lost not 19: $(cat "$work/c.err")"
  [[ "$(head -n1 "$work/out")" == 24 ]] || fail "resumed at $(head -n1 "$work/out")"
  ;;

follow)  # closed vs producer_died, and --follow across close, crash and takeover
  new_bus bus
  "$PRODUCER" "$bus" --create --keep-open </dev/null 2>/dev/null
  "$CONSUMER" "$bus" --follow --count 9 --json >"$work/f.out" 2>"$work/f.err" &
  fpid=$!
  pids+=($fpid)
  printf '1\n2\n3\n' | "$PRODUCER" "$bus" 2>/dev/null           # closes the bus
  # The follower sees that end before the next producer takes the bus over
  # (a takeover clears it: a follower still reading would never see it).
  for ((i = 0; i < 500; i++)); do grep -q "producer closed the bus" "$work/f.err" && break; sleep 0.01; done
  # A producer killed mid-stream: the follower goes on with the next one.
  mkfifo "$work/in2"
  exec 4<>"$work/in2"
  "$PRODUCER" "$bus" <"$work/in2" 2>/dev/null &
  kpid=$!
  pids+=($kpid)
  printf '4\n5\n6\n' >&4
  for ((i = 0; i < 500; i++)); do [[ $(wc -l <"$work/f.out") -ge 6 ]] && break; sleep 0.01; done
  [[ $(wc -l <"$work/f.out") -ge 6 ]] || fail "follower did not get the second producer's messages"
  kill -9 "$kpid"
  wait "$kpid" 2>/dev/null || true
  exec 4>&-
  for ((i = 0; i < 300; i++)); do grep -q "producer died" "$work/f.err" && break; sleep 0.01; done
  printf '7\n8\n9\n' | "$PRODUCER" "$bus" 2>/dev/null
  timeout 10 tail --pid="$fpid" -f /dev/null || fail "follower did not stop at --count"
  wait "$fpid" || fail "follower exit: $(cat "$work/f.err")"
  [[ "$(tr '\n' ' ' <"$work/f.out")" == "1 2 3 4 5 6 7 8 9 " ]] || fail "followed: $(cat "$work/f.out")"
  grep -q "producer closed the bus after seq 2; following" "$work/f.err" || fail "$(cat "$work/f.err")"
  grep -q "producer died after seq 5; following" "$work/f.err" || fail "$(cat "$work/f.err")"
  grep -q '"streams_followed":2' "$work/f.err" || fail "$(cat "$work/f.err")"
  # Without --follow: a crash is told apart from a close, and is a failure.
  new_bus bus2
  mkfifo "$work/in3"
  exec 5<>"$work/in3"
  "$PRODUCER" "$bus2" --create <"$work/in3" 2>/dev/null &
  kpid=$!
  pids+=($kpid)
  printf 'x\n' >&5
  "$CONSUMER" "$bus2" --wait-for-bus 10s --json >"$work/d.out" 2>"$work/d.json" &
  dpid=$!
  pids+=($dpid)
  for ((i = 0; i < 500; i++)); do [[ -s "$work/d.out" ]] && break; sleep 0.01; done
  [[ "$(cat "$work/d.out")" == x ]] || fail "consumer did not read the first message"
  kill -9 "$kpid"
  exec 5>&-
  rc=0
  timeout 10 bash -c "while kill -0 $dpid 2>/dev/null; do sleep 0.01; done" || fail "consumer did not notice the dead producer"
  wait "$dpid" || rc=$?
  [[ $rc -eq 1 ]] || fail "after a producer crash the consumer exited $rc, not 1"
  grep -q '"stopped_by":"producer_died"' "$work/d.json" || fail "$(cat "$work/d.json")"
  ;;

errors_bad_name)
  expect_failure producer_slash "^shmbus-producer: bus 'a/b'" "$PRODUCER" a/b --create
  expect_failure consumer_dotdot "^shmbus-consumer: bus '\.\./x'" "$CONSUMER" ../x
  expect_failure consumer_empty "^shmbus-consumer: bus ''" "$CONSUMER" ""
  ;;

errors_flags)
  expect_failure unknown_flag "^shmbus-producer: .*--bogus" "$PRODUCER" x --bogus
  [[ $LAST_RC -eq 2 ]] || fail "bad flag exit code $LAST_RC, want 2"
  expect_failure no_bus "^shmbus-consumer: .*bus.*required" "$CONSUMER"
  expect_failure bad_policy "^shmbus-producer: .*--policy" "$PRODUCER" x --create --policy sometimes
  expect_failure capacity_without_create "^shmbus-producer: .*--capacity.*--create" "$PRODUCER" x --capacity 64
  expect_failure size_without_count "^shmbus-producer: .*--size.*--count" "$PRODUCER" x --size 64
  expect_failure bad_duration "^shmbus-consumer: .*invalid duration '5parsecs'" "$CONSUMER" x --idle-timeout 5parsecs
  expect_failure bad_from "^shmbus-consumer: .*--from" "$CONSUMER" x --from yesterday
  expect_failure bad_format "^shmbus-consumer: .*--format" "$CONSUMER" x --format xml
  expect_failure count_and_file "^shmbus-producer: .*(--count|--file).*excludes" "$PRODUCER" x --count 1 --file f
  new_bus bus
  expect_failure bad_capacity "^shmbus-producer: bus '$bus':.*capacity" "$PRODUCER" "$bus" --create --capacity 1000
  ;;

errors_negative_numbers)  # "-1" is refused by every unsigned option, not read as 2^64-1
  new_bus bus
  # With --create, --count -1 would publish 2^64-1 messages: the timeout
  # turns that into a failure with a summary on stderr.
  expect_failure producer_count "^shmbus-producer: --count: must be 0 or more, not '-1' \(see --help\)$" \
    timeout 10 "$PRODUCER" "$bus" --create --count -1
  [[ $LAST_RC -eq 2 ]] || fail "producer --count -1: exit $LAST_RC, want 2"
  [[ ! -e "/dev/shm/shmbus.$bus" ]] || fail "a refused command line created the bus"
  expect_failure producer_count_eq "^shmbus-producer: --count: must be 0 or more, not '-1'" \
    timeout 10 "$PRODUCER" "$bus" --create --count=-1
  expect_failure producer_count_huge "^shmbus-producer: --count: must be at most 18446744073709551615, not '18446744073709551616'" \
    timeout 10 "$PRODUCER" "$bus" --create --count 18446744073709551616
  expect_failure producer_capacity "^shmbus-producer: --capacity: must be 0 or more, not '-2'" \
    "$PRODUCER" "$bus" --create --capacity -2
  expect_failure producer_size "^shmbus-producer: --size: must be 0 or more, not '-1'" \
    "$PRODUCER" "$bus" --create --count 1 --size -1
  expect_failure producer_max_readers "^shmbus-producer: --max-readers: must be 0 or more, not '-1'" \
    "$PRODUCER" "$bus" --create --max-readers -1
  expect_failure producer_readers "^shmbus-producer: --wait-for-readers: must be 0 or more, not '-1'" \
    "$PRODUCER" "$bus" --create --wait-for-readers -1
  [[ ! -e "/dev/shm/shmbus.$bus" ]] || fail "a refused command line created the bus"
  # The consumer: --count -1 would never stop at a count.
  printf 'a\nb\n' | "$PRODUCER" "$bus" --create --keep-open 2>/dev/null
  expect_failure consumer_count "^shmbus-consumer: --count: must be 0 or more, not '-1' \(see --help\)$" \
    timeout 10 "$CONSUMER" "$bus" --count -1
  [[ $LAST_RC -eq 2 ]] || fail "consumer --count -1: exit $LAST_RC, want 2"
  expect_failure consumer_from "^shmbus-consumer: --from: must be earliest, latest, resume or a sequence number" \
    "$CONSUMER" "$bus" --from -1
  [[ $LAST_RC -eq 2 ]] || fail "consumer --from -1: exit $LAST_RC, want 2"
  for args in "dump --count -1" "dump --from -1" "dump --last -1" "watch --count -1"; do
    read -r sub opt val <<<"$args"
    expect_failure "inspect_${sub}_${opt#--}" "^shmbus-inspect: $opt: must be 0 or more, not '-1'" \
      timeout 10 "$INSPECT" "$sub" "$bus" "$opt" "$val"
    [[ $LAST_RC -eq 2 ]] || fail "inspect $args: exit $LAST_RC, want 2"
  done
  if [[ -n "${BRIDGE:-}" ]]; then
    expect_failure bridge_capacity "^shmbus-bridge: --capacity: must be 0 or more, not '-1'" \
      timeout 10 "$BRIDGE" mirror --connect 127.0.0.1:1 --remote-bus r --bus "$bus" --capacity -1
    [[ $LAST_RC -eq 2 ]] || fail "bridge --capacity -1: exit $LAST_RC, want 2"
  fi
  if [[ -n "${NATS:-}" ]]; then
    expect_failure nats_out_count "^shmbus-nats: --count: must be 0 or more, not '-1'" \
      timeout 10 "$NATS" out "$bus" --stream s --server nats://127.0.0.1:1 --count -1
    [[ $LAST_RC -eq 2 ]] || fail "nats out --count -1: exit $LAST_RC, want 2"
    expect_failure nats_in_count "^shmbus-nats: --count: must be 0 or more, not '-1'" \
      timeout 10 "$NATS" in "$bus" --stream s --durable d --server nats://127.0.0.1:1 --count -1
    [[ $LAST_RC -eq 2 ]] || fail "nats in --count -1: exit $LAST_RC, want 2"
    expect_failure nats_in_capacity "^shmbus-nats: --capacity: must be 0 or more, not '-1'" \
      timeout 10 "$NATS" in "$bus" --stream s --durable d --server nats://127.0.0.1:1 --capacity -1
  fi
  ;;

errors_rate_range)  # a --rate whose pacing interval is not a pace is refused, not a hang
  new_bus bus
  # 1e9 / 1e-300 ns is infinite: no message, not even the first, was ever due.
  expect_failure tiny "^shmbus-producer: --rate: must be at least 0\.001 \(one message every 1000 s\), not '1e-300' \(see --help\)$" \
    timeout 10 "$PRODUCER" "$bus" --create --count 2 --rate 1e-300
  [[ $LAST_RC -eq 2 ]] || fail "--rate 1e-300: exit $LAST_RC, want 2"
  expect_failure below "^shmbus-producer: --rate: must be at least 0\.001 .*not '0\.0009'" \
    timeout 10 "$PRODUCER" "$bus" --create --count 2 --rate 0.0009
  expect_failure tiny_input "^shmbus-producer: --rate: must be at least 0\.001 .*not '1e-300'" \
    timeout 10 "$PRODUCER" "$bus" --create --rate 1e-300
  [[ ! -e "/dev/shm/shmbus.$bus" ]] || fail "a refused --rate created the bus"
  for r in inf nan 1e400 -1; do
    expect_failure "rate_$r" "^shmbus-producer: --rate: must be a positive number, not '$r'" \
      "$PRODUCER" "$bus" --create --count 2 --rate "$r"
  done
  # The lowest rate itself is accepted (message 0 is due at once).
  timeout 10 "$PRODUCER" "$bus" --create --count 1 --rate 0.001 2>"$work/lowest.err" ||
    fail "--rate 0.001: $(cat "$work/lowest.err")"
  grep -q "1 message," "$work/lowest.err" || fail "--rate 0.001: $(cat "$work/lowest.err")"
  # A rate past any clock's resolution is simply as fast as possible.
  timeout 10 "$PRODUCER" "$bus" --count 1000 --rate 1e300 2>"$work/highest.err" ||
    fail "--rate 1e300: $(cat "$work/highest.err")"
  grep -q "1000 messages," "$work/highest.err" || fail "--rate 1e300: $(cat "$work/highest.err")"
  ;;

errors_create_leaves_nothing)  # a --create run that fails leaves no segment it made
  # no_segment NAME: the failed run left no /dev/shm/shmbus.NAME.
  no_segment() { [[ ! -e "/dev/shm/shmbus.$1" ]] || fail "$2: left /dev/shm/shmbus.$1 behind"; }
  new_bus bus
  expect_failure size_zero "^shmbus-producer: bus '$bus': --size 0 is below the synthetic message's fixed part of 24 bytes" \
    "$PRODUCER" "$bus" --create --count 10 --size 0
  [[ $LAST_RC -eq 2 ]] || fail "--size 0: exit $LAST_RC, want 2"
  no_segment "$bus" "--size 0"
  expect_failure size_record "^shmbus-producer: bus '$bus': --size 300 is longer than the bus's max message of 232 bytes \(capacity 8, record size 64: a message takes at most half the ring\)$" \
    "$PRODUCER" "$bus" --create --count 10 --size 300 --capacity 8 --record-size 64
  [[ $LAST_RC -eq 2 ]] || fail "--size 300 --capacity 8 --record-size 64: exit $LAST_RC, want 2"
  no_segment "$bus" "--size 300 --capacity 8 --record-size 64"
  # No record holds 20 MB: the default record size (256), and spans of half the default ring (4 MiB).
  expect_failure size_any_record "^shmbus-producer: bus '$bus': --size 20000000 is longer than the bus's max message of 2097128 bytes \(capacity 16384, record size 256" \
    "$PRODUCER" "$bus" --create --count 10 --size 20000000
  [[ $LAST_RC -eq 2 ]] || fail "--size 20000000: exit $LAST_RC, want 2"
  no_segment "$bus" "--size 20000000"
  expect_failure size_mix_min "^shmbus-producer: bus '$bus': --size 16 is below the synthetic message's fixed part of 24 bytes" \
    "$PRODUCER" "$bus" --create --count 10 --size 16..5000
  [[ $LAST_RC -eq 2 ]] || fail "--size 16..5000: exit $LAST_RC, want 2"
  expect_failure size_mix_order "^shmbus-producer: bus '$bus': --size 5000..24: MIN is larger than MAX$" \
    "$PRODUCER" "$bus" --create --count 10 --size 5000..24
  expect_failure size_not_a_number "^shmbus-producer: bus '$bus': --size '24..x' is not a byte count N or a range MIN..MAX$" \
    "$PRODUCER" "$bus" --create --count 10 --size 24..x
  [[ $LAST_RC -eq 2 ]] || fail "--size 24..x: exit $LAST_RC, want 2"
  no_segment "$bus" "--size 24..x"
  expect_failure no_file "^shmbus-producer: bus '$bus': cannot open '$work/missing'" \
    "$PRODUCER" "$bus" --create --file "$work/missing"
  no_segment "$bus" "--file missing"
  expect_failure max_readers "^shmbus-producer: bus '$bus': max readers 1025 is not between 1 and 1024" \
    "$PRODUCER" "$bus" --create --max-readers 1025
  [[ $LAST_RC -eq 2 ]] || fail "--max-readers 1025: exit $LAST_RC, want 2"
  no_segment "$bus" "--max-readers 1025"
  # Created, then refused by the library after creating: nobody attached.
  expect_failure no_readers "^shmbus-producer: bus '$bus': .*reader" \
    "$PRODUCER" "$bus" --create --count 10 --size 32 --wait-for-readers 1 --wait-timeout 200ms
  [[ $LAST_RC -eq 1 ]] || fail "--wait-for-readers timeout: exit $LAST_RC, want 1"
  no_segment "$bus" "--wait-for-readers timeout"
  # The library's limits themselves are fine.
  "$PRODUCER" "$bus" --create --max-readers 1024 --capacity 2 --keep-open </dev/null 2>"$work/limits.err" ||
    fail "--max-readers 1024 --capacity 2: $(cat "$work/limits.err")"
  "$INSPECT" check "$bus" >/dev/null || fail "--max-readers 1024 --capacity 2: check failed"

  # An existing bus is never removed, whatever fails.
  new_bus old
  "$PRODUCER" "$old" --create --capacity 8 --record-size 64 --keep-open </dev/null 2>/dev/null
  expect_failure old_size "^shmbus-producer: bus '$old': --size 300 is longer than the bus's max message of 232 bytes \(capacity 8, record size 64" \
    "$PRODUCER" "$old" --create --count 10 --size 300
  [[ $LAST_RC -eq 1 ]] || fail "--size past an existing bus's records: exit $LAST_RC, want 1"
  [[ -e "/dev/shm/shmbus.$old" ]] || fail "an existing bus was removed after --size failed"
  expect_failure old_readers "^shmbus-producer: bus '$old': .*reader" \
    "$PRODUCER" "$old" --create --count 10 --size 32 --wait-for-readers 1 --wait-timeout 200ms
  [[ -e "/dev/shm/shmbus.$old" ]] || fail "an existing bus was removed after --wait-for-readers failed"

  # A bus this run created but a reader joined is in use: it stays.
  new_bus joined
  "$CONSUMER" "$joined" --wait-for-bus 10s --format none >/dev/null 2>"$work/joined.err" &
  pids+=($!)
  expect_failure joined "^shmbus-producer: bus '$joined': .*reader" \
    "$PRODUCER" "$joined" --create --count 10 --size 32 --wait-for-readers 2 --wait-timeout 2s
  [[ -e "/dev/shm/shmbus.$joined" ]] || fail "a created bus a reader had joined was removed"
  "$INSPECT" show "$joined" --interval 0 | grep -q "shmbus-consumer" || fail "the reader is not attached"

  if [[ -n "${NATS:-}" ]]; then
    new_bus nats
    expect_failure nats_no_server "^shmbus-nats: cannot connect" \
      "$NATS" in "$nats" --stream s --durable d --server nats://127.0.0.1:1 --connect-timeout 200
    no_segment "$nats" "shmbus-nats in without a server"
  fi
  ;;

errors_wait_timeout)
  new_bus bus
  "$PRODUCER" "$bus" --create --capacity 64 --record-size 64 --keep-open </dev/null 2>/dev/null
  expect_failure wait_for_readers "^shmbus-producer: bus '$bus':.*" \
    "$PRODUCER" "$bus" --count 10 --size 32 --wait-for-readers 1 --wait-timeout 300ms
  # A consumer that is attached but stalled (stdout is a full pipe): the ring
  # fills and the producer gives up after --wait-timeout.
  mkfifo "$work/stall"
  exec 3<>"$work/stall"
  "$CONSUMER" "$bus" --format hex >"$work/stall" 2>/dev/null &
  pids+=($!)
  sleep 0.3
  rc=0
  "$PRODUCER" "$bus" --count 100000 --size 32 --wait-timeout 500ms >/dev/null 2>"$work/full.err" || rc=$?
  [[ $rc -eq 1 ]] || fail "full ring: rc=$rc"
  grep -q "^shmbus-producer: bus '$bus': the ring stayed full for 500 ms" "$work/full.err" || fail "$(cat "$work/full.err")"
  note "$(head -n1 "$work/full.err")"
  exec 3>&-
  ;;

errors_start_and_slots)
  new_bus bus
  printf 'a\nb\n' | "$PRODUCER" "$bus" --create --max-readers 1 --keep-open 2>/dev/null
  expect_failure future "^shmbus-consumer: bus '$bus': --from 100 is in the future" "$CONSUMER" "$bus" --from 100
  "$CONSUMER" "$bus" --format none >/dev/null 2>&1 &
  pids+=($!)
  sleep 0.3
  expect_failure table_full "^shmbus-consumer: bus '$bus':.*(reader|slot)" "$CONSUMER" "$bus"
  ;;

open_while_creating)
  # A bus appears under its name only once its creator has finished it (it
  # is built under a temporary name and renamed into place): opening it the
  # moment it appears always succeeds. A large segment makes creation slow.
  for i in 1 2 3 4 5; do
    new_bus bus
    "$PRODUCER" "$bus" --create --capacity 262144 --record-size 128 --keep-open </dev/null 2>/dev/null &
    pids+=($!)
    until [[ -e "/dev/shm/shmbus.$bus" ]]; do :; done
    "$CONSUMER" "$bus" --idle-timeout 10ms --format none 2>"$work/open$i.err" \
      || fail "attempt $i: opening a bus being created failed: $(cat "$work/open$i.err")"
    wait "${pids[-1]}"
  done
  # A file at the name that was never initialised (not made by shmbus) is
  # refused at once, --wait-for-bus or not: there is no creator to wait for.
  new_bus bogus
  head -c 8192 /dev/zero >"/dev/shm/shmbus.$bogus"
  start=$(date +%s%N)
  rc=0
  "$CONSUMER" "$bogus" --wait-for-bus 5s --count 1 2>"$work/bogus.err" || rc=$?
  took_ms=$((($(date +%s%N) - start) / 1000000))
  [[ $rc -eq 1 ]] || fail "a never-initialised segment: exit $rc: $(cat "$work/bogus.err")"
  grep -q 'never initialised' "$work/bogus.err" || fail "$(cat "$work/bogus.err")"
  [[ $took_ms -lt 2500 ]] || fail "took $took_ms ms to refuse a never-initialised segment (waited for a creator)"
  ;;

spans_binary)  # frames of 1 B to 4 MiB, most spanning 256-byte records, come out byte for byte
  # 65536 records of 256 bytes: a message takes at most 32768 of them, 8 MiB - 24 bytes.
  python3 - "$work/frames" <<'PY'
import random, struct, sys
rng = random.Random(8)
sizes = [1, 232, 233, 464, 465, 1000, 5000, 65536, 1 << 20, 4 << 20, 0, 2]
sizes += [rng.randrange(1, 300000) for _ in range(30)]
rng.shuffle(sizes)
with open(sys.argv[1], 'wb') as out:
    for n in sizes:
        out.write(struct.pack('<I', n) + rng.randbytes(n))
PY
  cat "$work/frames" "$work/frames" >"$work/frames2"  # about 20 MB: more than the 16 MiB ring, so spans wrap
  ring=(--capacity 65536 --record-size 256)
  # block: the consumer attached before the producer starts holds it back.
  new_bus bus
  "$CONSUMER" "$bus" --wait-for-bus 20s --format binary >"$work/block.out" 2>"$work/block.err" &
  pids+=($!)
  "$PRODUCER" "$bus" --create "${ring[@]}" --binary --file "$work/frames2" --wait-for-readers 1 --wait-timeout 30s \
    --json 2>"$work/block.p" || fail "block producer: $(cat "$work/block.p")"
  wait "${pids[-1]}" || fail "block consumer: $(cat "$work/block.err")"
  cmp "$work/frames2" "$work/block.out" || fail "block: frames in != frames out"
  [[ "$(json_field "$work/block.p" messages)" == 84 ]] || fail "block: $(cat "$work/block.p")"
  "$INSPECT" check "$bus" >"$work/block.check" || fail "block: check: $(cat "$work/block.check")"
  # overwrite: one lap holds it all, read after the producer and while it publishes.
  new_bus bus2
  "$CONSUMER" "$bus2" --wait-for-bus 20s --format binary --json >"$work/live.out" 2>"$work/live.err" &
  pids+=($!)
  "$PRODUCER" "$bus2" --create "${ring[@]}" --policy overwrite --binary --file "$work/frames" \
    --wait-for-readers 1 2>"$work/over.p" || fail "overwrite producer: $(cat "$work/over.p")"
  wait "${pids[-1]}" || fail "overwrite consumer: $(cat "$work/live.err")"
  [[ "$(json_field "$work/live.err" lost)" == 0 ]] || fail "overwrite consumer lost messages: $(cat "$work/live.err")"
  cmp "$work/frames" "$work/live.out" || fail "overwrite, read live: frames in != frames out"
  "$CONSUMER" "$bus2" --format binary >"$work/after.out" 2>"$work/after.err" || fail "$(cat "$work/after.err")"
  cmp "$work/frames" "$work/after.out" || fail "overwrite, read after: frames in != frames out"
  # The consumer's JSON names the records a message takes.
  "$CONSUMER" "$bus2" --format json 2>/dev/null | grep -ao '"length":[0-9]*,"records":[0-9]*' | sort -u >"$work/records"
  grep -qx '"length":4194304,"records":16385' "$work/records" || fail "json records: $(cat "$work/records")"
  grep -qx '"length":233,"records":2' "$work/records" || fail "json records: $(cat "$work/records")"
  ! grep -q '"length":232,' "$work/records" || fail "a one-record message carries records: $(cat "$work/records")"
  # Past the bus's max message: one line naming both sizes.
  new_bus small
  "$PRODUCER" "$small" --create --capacity 64 --record-size 256 --keep-open </dev/null 2>/dev/null
  rc=0
  "$PRODUCER" "$small" --binary --file "$work/frames" 2>"$work/too_long.err" || rc=$?
  [[ $rc -eq 1 ]] || fail "a frame past the max message: exit $rc"
  grep -Eq "^shmbus-producer: bus '$small': frame [0-9]+ of $work/frames is [0-9]+ bytes, longer than the bus's max message of 8168 bytes \(capacity 64, record size 256" \
    "$work/too_long.err" || fail "$(cat "$work/too_long.err")"
  note "$(head -n1 "$work/too_long.err")"
  ;;

spans_verify)  # --verify over a deterministic mix of sizes, in block and overwrite
  new_bus bus
  n=20000
  # 4096 records of 64 bytes: messages of up to 79 records lap the 256 KiB ring 150 times, padding its ends.
  "$CONSUMER" "$bus" --wait-for-bus 20s --verify --format none --json 2>"$work/v.json" &
  pids+=($!)
  "$PRODUCER" "$bus" --create --capacity 4096 --record-size 64 --count "$n" --size 24..5000 \
    --wait-for-readers 1 --json 2>"$work/p.json" || fail "producer: $(cat "$work/p.json")"
  wait "${pids[-1]}" || fail "verify failed: $(cat "$work/v.json")"
  check_verified "$work/v.json" "$n"
  last=$(json_field "$work/p.json" last_seq)
  (( last > 40 * n )) || fail "sequence numbers do not count records: last_seq $last for $n messages"
  [[ "$(json_field "$work/v.json" last_seq)" == "$last" ]] || fail "last_seq: $(cat "$work/v.json") vs $(cat "$work/p.json")"
  # The same mix every run: the bytes published match.
  new_bus again
  "$PRODUCER" "$again" --create --capacity 4096 --record-size 64 --count "$n" --size 24..5000 --json 2>"$work/p2.json"
  [[ "$(json_field "$work/p2.json" bytes)" == "$(json_field "$work/p.json" bytes)" ]] || fail "the mix differs between runs"
  # overwrite, a ring big enough to hold them all, read after: nothing lost.
  new_bus over
  "$PRODUCER" "$over" --create --capacity 131072 --record-size 64 --policy overwrite --count 1000 --size 24..5000 \
    2>/dev/null || fail "overwrite producer"
  "$CONSUMER" "$over" --verify --format none --json 2>"$work/o.json" || fail "overwrite verify: $(cat "$work/o.json")"
  check_verified "$work/o.json" 1000
  # A bus created for a mix gets records sized to its smallest message.
  "$INSPECT" show "$over" --json >"$work/show.json"
  grep -q '"record_size":64,' "$work/show.json" || fail "record size for 24..5000: $(grep record_size "$work/show.json")"
  ;;

spans_inspect)  # dump, show and check on a bus whose messages span records
  new_bus bus
  # 64 records of 64 bytes; lines 1..50 take seq 0..49, then 1000 bytes need 16 records: they
  # do not fit before the end of the ring, so 50..63 are padding and the message takes 64..79.
  { seq 1 50; printf 'x%.0s' {1..1000}; echo; } | "$PRODUCER" "$bus" --create --capacity 64 --record-size 64 --keep-open 2>/dev/null
  "$INSPECT" dump "$bus" --from 48 --count 0 >"$work/dump" || fail "dump: $(cat "$work/dump")"
  [[ $(wc -l <"$work/dump") -eq 4 ]] || fail "dump lines: $(cat "$work/dump")"
  grep -q '^seq 49  no timestamp  len 2  "50"$' "$work/dump" || fail "$(cat "$work/dump")"
  grep -q '^seq 50  padding: continues at seq 64, the rest of the lap (14 records) padded before a message that spans records$' \
    "$work/dump" || fail "padding: $(cat "$work/dump")"
  grep -q '^seq 64  no timestamp  len 1000  spans 16 records  "xxxx' "$work/dump" || fail "span: $(cat "$work/dump")"
  "$INSPECT" dump "$bus" --from 70 >"$work/inside" || fail "dump --from 70: $(cat "$work/inside")"
  [[ "$(cat "$work/inside")" == "seq 70  inside the message at seq 64 (16 records): 10 records to its end, continues at seq 80" ]] \
    || fail "inside: $(cat "$work/inside")"
  "$INSPECT" dump "$bus" --from 49 --count 0 --json >"$work/dump.json"
  python3 - "$work/dump.json" <<'PY' || fail "dump --json: $(cat "$work/dump.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["gaps"] == [{"seq": 50, "continues_at": 64, "lost": 0, "padding": True}], d["gaps"]
assert [(r["seq"], r["length"], r.get("records")) for r in d["records"]] == [(49, 2, None), (64, 1000, 16)], d["records"]
assert d["inside"] == [], d["inside"]
PY
  "$INSPECT" dump "$bus" --last 3 --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["inside"] == [{"seq": 77, "continues_at": 80, "message_seq": 64}], d' || fail "dump --last 3 --json"
  "$INSPECT" show "$bus" >"$work/show" || fail "show"
  grep -q '^  ring       64 records x 64 B (max payload 40 B, max message 2024 B)' "$work/show" || fail "$(cat "$work/show")"
  grep -q '^  messages   32 messages in 47 records; 1 of them span records (16 records, 26.2% of the retained; the largest 16); 14 records of padding$' \
    "$work/show" || fail "show: $(grep messages "$work/show")"
  "$INSPECT" show "$bus" --json | python3 -c '
import json, sys
u = json.load(sys.stdin)["ring_use"]
assert u == {"messages": 32, "message_records": 47, "spans": 1, "span_records": 16, "largest_span": 16,
             "padding": 14, "gaps": 0, "partial": 0, "unreadable": 0}, u' || fail "show --json ring_use"
  "$INSPECT" check "$bus" >"$work/check" || fail "check of a clean bus: $(cat "$work/check")"
  # The span's header says 2 records: too few for 1000 bytes.
  seg="/dev/shm/shmbus.$bus"
  log_offset=$(od -An -tu8 -j48 -N8 "$seg" | tr -d ' ')
  printf '\x02\x00\x00\x00' | dd of="$seg" bs=1 seek=$((log_offset + 20)) conv=notrunc status=none
  rc=0
  "$INSPECT" check "$bus" >"$work/bad" || rc=$?
  [[ $rc -eq 1 ]] || fail "check of a corrupt span: exit $rc"
  grep -q "^  record 64 (slot 0): takes 2 records, which cannot hold 1000 bytes" "$work/bad" || fail "check: $(cat "$work/bad")"
  note "$(grep 'record 64' "$work/bad")"
  ;;

*)
  echo "unknown case: $case_name" >&2
  exit 2
  ;;
esac
note "ok"
