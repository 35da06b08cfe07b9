#!/usr/bin/env bash
# Hostile local users (docs/SECURITY.md): each case runs the real programs,
# partly as a second, unprivileged user. One case per ctest test:
#   PRODUCER=... CONSUMER=... INSPECT=... security_test.sh CASE
# Cases that need a second user create one (shmbus-sectest) when run as root
# and are skipped (exit code 77, with the reason) otherwise.
set -euo pipefail

case_name=${1:?usage: security_test.sh CASE}
: "${PRODUCER:?}" "${CONSUMER:?}" "${INSPECT:?}"

bus_prefix=sec
work_prefix=shmbus-sec
# shellcheck source=../lib/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/harness.sh"
chmod 0755 "$work"  # the second user runs the programs copied here

# The programs, copied where a second user may run them whatever the build
# directory's permissions.
for p in PRODUCER CONSUMER INSPECT; do
  cp "${!p}" "$work/${p,,}"
  chmod 0755 "$work/${p,,}"
done
producer=$work/producer
consumer=$work/consumer
inspect=$work/inspect

OTHER=shmbus-sectest
need_other_user() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "SKIP [$case_name]: needs root to create and become a second user ($OTHER)" >&2
    exit 77
  fi
  # Cases run in parallel: one creates the user while the others wait, so
  # none sees it half-written (its passwd entry before its group).
  exec 9>"${TMPDIR:-/tmp}/shmbus-sectest.lock"
  flock 9
  if ! id -u "$OTHER" >/dev/null 2>&1 &&
     ! useradd --system --no-create-home --shell /usr/sbin/nologin "$OTHER"; then
    echo "SKIP [$case_name]: could not create the user $OTHER (useradd failed)" >&2
    exit 77
  fi
  flock -u 9
  exec 9>&-
}
# as_other CMD...: runs CMD as the second user, no supplementary groups.
as_other() {
  setpriv --reuid="$OTHER" --regid="$OTHER" --clear-groups --reset-env -- "$@"
}

allocated_kib() { du -k "$1" | cut -f1; }

case $case_name in

squatted_name)
  # A second user creates the segment first; root's producer must not join it,
  # so nothing root publishes can be read by that user.
  need_other_user
  new_bus bus
  as_other "$producer" "$bus" --create --mode 0666 --count 0 --keep-open 2>"$work/squat.err" ||
    fail "the second user could not create a bus"
  [[ $(stat -c %U "/dev/shm/shmbus.$bus") == "$OTHER" ]] || fail "segment is not the second user's"
  expect_failure join 'belongs to uid [0-9]+ \('"$OTHER"'\).*mode 0666.*not trusted' \
    bash -c "printf 'root-secret\n' | '$producer' '$bus' --create --keep-open"
  expect_failure open 'belongs to uid [0-9]+ \('"$OTHER"'\)' bash -c "printf 'root-secret\n' | '$producer' '$bus'"
  expect_failure consume 'belongs to uid [0-9]+ \('"$OTHER"'\)' "$consumer" "$bus" --count 1
  expect_failure inspect 'not trusted' "$inspect" show "$bus"
  as_other "$inspect" dump "$bus" --count 0 >"$work/dump.out" 2>&1 || true
  ! grep -q 'root-secret' "$work/dump.out" || fail "root's message reached the squatter's segment"
  [[ $(as_other "$inspect" show "$bus" --json --interval 0 | grep -o '"head": *[0-9]*' | grep -o '[0-9]*$') == 0 ]] ||
    fail "something was published into the squatted segment"
  # Trusting that user on purpose works.
  printf 'shared\n' | "$producer" "$bus" --keep-open --trust-owner "$OTHER" 2>"$work/trusted.err" ||
    fail "--trust-owner did not let the producer in: $(cat "$work/trusted.err")"
  "$consumer" "$bus" --count 1 --trust-owner "$OTHER" >"$work/trusted.out" 2>/dev/null ||
    fail "--trust-owner did not let the consumer in"
  grep -qx shared "$work/trusted.out" || fail "trusted consumer read $(cat "$work/trusted.out")"
  ;;

trusted_group)
  # A 0660 bus shared with a group: members use it with --trust-group.
  need_other_user
  new_bus bus
  grp=$(id -gn "$OTHER")
  as_other "$producer" "$bus" --create --mode 0660 --count 0 --keep-open 2>/dev/null ||
    fail "the second user could not create a bus"
  expect_failure untrusted 'not trusted' "$consumer" "$bus" --count 1
  printf 'g\n' | "$producer" "$bus" --keep-open --trust-group "$grp" 2>/dev/null ||
    fail "--trust-group did not let the producer in"
  "$consumer" "$bus" --count 1 --trust-group "$grp" >"$work/g.out" 2>/dev/null || fail "--trust-group consumer"
  grep -qx g "$work/g.out" || fail "group consumer read $(cat "$work/g.out")"
  expect_failure unknown_group 'no such group' "$consumer" "$bus" --trust-group no-such-group-xyz
  ;;

wider_mode)
  # open_or_create (--create) does not silently join our own bus when it is
  # more permissive than what was asked for.
  new_bus bus
  "$producer" "$bus" --create --mode 0666 --count 0 --keep-open 2>/dev/null || fail "create"
  expect_failure wider 'mode 0666, more permissive than the requested 0600' \
    "$producer" "$bus" --create --count 1 --size 64
  "$producer" "$bus" --create --mode 0666 --count 1 --size 64 --keep-open 2>/dev/null ||
    fail "asking for the same mode must join"
  ;;

read_only_mode)
  # --mode 0644: another user may look (shmbus-inspect maps read-only) but
  # not consume (a consumer writes its reader slot and cursor).
  need_other_user
  new_bus bus
  printf 'r\n' | "$producer" "$bus" --create --mode 0644 --keep-open 2>/dev/null || fail "create"
  as_other "$inspect" show "$bus" --interval 0 >"$work/show.out" 2>"$work/show.err" ||
    fail "the other user could not inspect a 0644 bus: $(cat "$work/show.err")"
  grep -q "^bus '$bus'" "$work/show.out" || fail "show: $(cat "$work/show.out")"
  expect_failure consume_denied "^shmbus-consumer: bus '$bus':.*permission denied.*needs read and write access" \
    as_other "$consumer" "$bus" --count 1
  [[ $LAST_RC -eq 1 ]] || fail "denied consumer: exit $LAST_RC"
  ;;

sparse_segment)
  # A segment whose pages are not allocated is refused before it is mapped:
  # nothing allocates /dev/shm on the opener's behalf, nothing raises SIGBUS.
  new_bus bus
  seg=/dev/shm/shmbus.$bus
  "$producer" "$bus" --create --capacity 16384 --record-size 1024 --count 10 --size 64 --keep-open 2>/dev/null ||
    fail "create"
  fallocate --punch-hole --offset 1048576 --length 8388608 "$seg"
  before=$(allocated_kib "$seg")
  note "segment claims $(stat -c %s "$seg") bytes, $before KiB allocated"
  # check names what it found on stdout, then fails with one line.
  "$inspect" check "$bus" >"$work/check.out" 2>"$work/check.err" && fail "check exited 0"
  grep -q 'check found 1 problem' "$work/check.err" || fail "check: $(cat "$work/check.err")"
  grep -q 'allocated (a sparse file)' "$work/check.out" ||
    fail "check did not name the sparse segment: $(cat "$work/check.out")"
  expect_failure consume 'sparse file' "$consumer" "$bus" --count 1
  expect_failure produce 'sparse file' "$producer" "$bus" --count 1 --size 64
  expect_failure gc 'sparse file' "$inspect" gc "$bus"
  after=$(allocated_kib "$seg")
  [[ $after -eq $before ]] || fail "opening allocated memory: $before KiB before, $after KiB after"
  # The inspector's JSON check names the code too.
  "$inspect" check "$bus" --json >"$work/check.json" 2>/dev/null && fail "check --json exited 0"
  grep -q not_allocated "$work/check.json" || fail "check --json: $(cat "$work/check.json")"
  ;;

truncate_denied)
  # Only writers can truncate a segment, and by default only its owner may
  # write it: another user can neither shrink nor remove a bus.
  need_other_user
  new_bus bus
  seg=/dev/shm/shmbus.$bus
  "$producer" "$bus" --create --count 100 --size 64 --keep-open 2>/dev/null || fail "create"
  size=$(stat -c %s "$seg")
  as_other truncate -s 4096 "$seg" 2>"$work/truncate.err" && fail "the second user truncated a 0600 bus"
  grep -qi 'permission denied' "$work/truncate.err" || fail "truncate: $(cat "$work/truncate.err")"
  [[ $(stat -c %s "$seg") -eq $size ]] || fail "segment size changed"
  "$inspect" check "$bus" >/dev/null 2>&1 || fail "bus is not clean after the attempt"
  "$consumer" "$bus" --count 100 --verify --format none 2>/dev/null || fail "messages were damaged"
  ;;

rm_denied)
  # Removing a bus we may not remove says so, instead of "no such bus".
  need_other_user
  new_bus bus
  "$producer" "$bus" --create --mode 0644 --count 0 --keep-open 2>/dev/null || fail "create"
  expect_failure rm 'cannot remove /dev/shm/shmbus\..*(not permitted|denied).*only its owner or root' \
    as_other "$inspect" rm "$bus"
  [[ -e /dev/shm/shmbus.$bus ]] || fail "the bus was removed"
  new_bus closed
  "$producer" "$closed" --create --count 0 --keep-open 2>/dev/null || fail "create"
  expect_failure rm_0600 'permission denied' as_other "$inspect" rm "$closed" --force
  [[ -e /dev/shm/shmbus.$closed ]] || fail "the 0600 bus was removed"
  expect_failure rm_missing 'no such bus' "$inspect" rm "sec-missing-$$"
  ;;

dash_name)
  expect_failure producer "invalid name: starts with '-'" "$producer" --create --count 0 -- -bus
  expect_failure consumer "invalid name: starts with '-'" "$consumer" -- -bus
  expect_failure inspect "invalid name: starts with '-'" "$inspect" show -- -bus
  ;;

foreign_0600)
  # Another user's private (0600) bus cannot be opened by us at all: not to
  # read, not to publish, not to inspect.
  need_other_user
  new_bus bus
  printf 'private\n' | "$producer" "$bus" --create --keep-open 2>/dev/null || fail "create"
  [[ $(stat -c %a "/dev/shm/shmbus.$bus") == 600 ]] || fail "bus is not 0600"
  expect_failure consume 'permission denied' as_other "$consumer" "$bus" --count 1
  expect_failure produce 'permission denied' as_other "$producer" "$bus" --count 1 --size 64
  expect_failure inspect 'permission denied' as_other "$inspect" show "$bus"
  expect_failure dump 'permission denied' as_other "$inspect" dump "$bus"
  "$consumer" "$bus" --count 1 >"$work/own.out" 2>/dev/null || fail "the owner cannot read its bus"
  grep -qx private "$work/own.out" || fail "owner read $(cat "$work/own.out")"
  ;;

symlink)
  # A symlink planted at the segment's path (/dev/shm is world-writable) is
  # never followed: creating does not write through it, opening refuses it.
  new_bus bus
  seg=/dev/shm/shmbus.$bus
  printf 'precious\n' >"$work/target"
  ln -s "$work/target" "$seg"
  expect_failure create "$bus" "$producer" "$bus" --create --count 1 --size 64
  expect_failure open "$bus" "$consumer" "$bus" --count 1
  expect_failure inspect "$bus" "$inspect" check "$bus"
  [[ $(cat "$work/target") == precious ]] || fail "the symlink's target was changed"
  [[ -L $seg ]] || fail "the symlink was replaced"
  # A symlink to a real bus is refused too, not used as that bus.
  new_bus real
  "$producer" "$real" --create --count 1 --size 64 --keep-open 2>/dev/null || fail "create the real bus"
  rm -f "$seg"
  ln -s "/dev/shm/shmbus.$real" "$seg"
  expect_failure alias "$bus" "$consumer" "$bus" --count 1
  ;;

fifo_planted)
  # A FIFO planted at a bus path (/dev/shm is world-writable) must not hang
  # anything that lists, shows, exports or opens buses: one line of error,
  # and the other buses are still listed.
  new_bus bus
  new_bus good
  "$producer" "$good" --create --count 0 --keep-open 2>/dev/null || fail "create"
  mkfifo "/dev/shm/shmbus.$bus"
  timeout 10 "$inspect" list >"$work/list.out" 2>"$work/list.err" || [[ $? -lt 124 ]] || fail "list hung on a FIFO"
  grep -q "$good" "$work/list.out" || fail "list lost the good bus"
  grep -q "$bus" "$work/list.out" || fail "list does not show the FIFO"
  expect_failure show 'not a regular file.*FIFO' timeout 10 "$inspect" show "$bus"
  expect_failure open 'not a regular file.*FIFO' timeout 10 "$consumer" "$bus" --count 1
  timeout 10 "$inspect" metrics >"$work/metrics.out" 2>"$work/metrics.err" || [[ $? -lt 124 ]] ||
    fail "metrics hung on a FIFO"
  grep -q "shmbus_bus_head{bus=\"$good\"" "$work/metrics.out" || fail "metrics lost the good bus"
  expect_failure create 'not a regular file|exists' timeout 10 "$producer" "$bus" --create --count 1
  [[ -p /dev/shm/shmbus.$bus ]] || fail "the FIFO was replaced"
  ;;

hard_link)
  # Another name for a bus's file (a hard link, as a user with write access
  # to a group-shared bus can make) would let that user feed or read a bus
  # under a name someone else chose: a file with more than one link is
  # refused, under either name.
  new_bus bus
  new_bus alias
  "$producer" "$bus" --create --count 0 --keep-open 2>/dev/null || fail "create"
  ln "/dev/shm/shmbus.$bus" "/dev/shm/shmbus.$alias"
  expect_failure alias_consumer 'hard links' "$consumer" "$alias" --count 1
  expect_failure alias_producer 'hard links' "$producer" "$alias" --count 1
  expect_failure original_consumer 'hard links' "$consumer" "$bus" --count 1
  rm -f "/dev/shm/shmbus.$alias"
  printf 'ok\n' | "$producer" "$bus" 2>/dev/null || fail "the bus is not usable once the link is gone"
  ;;

rm_force_group_member)
  # A group member who may open a root bus but not remove it (only the
  # owner or root may, in /dev/shm) fails with one line, and ends nobody's
  # stream on the way.
  need_other_user
  new_bus bus
  grp=$(id -gn "$OTHER")
  "$producer" "$bus" --create --mode 0660 --count 0 --keep-open 2>/dev/null || fail "create"
  chgrp "$grp" "/dev/shm/shmbus.$bus"
  "$consumer" "$bus" --count 2 >"$work/reader.out" 2>"$work/reader.err" &
  reader=$!
  pids+=("$reader")
  for _ in $(seq 100); do
    [[ $("$inspect" show "$bus" --interval 0 2>/dev/null) == *'(1 in use)'* ]] && break
    sleep 0.05
  done
  expect_failure rm 'cannot remove.*(not permitted|denied)' as_other "$inspect" rm "$bus" --force
  [[ -e /dev/shm/shmbus.$bus ]] || fail "the bus was removed"
  printf 'a\nb\n' | "$producer" "$bus" 2>"$work/p.err" || fail "the producer was stopped by a failed rm"
  wait "$reader" || fail "the reader's stream was ended by a failed rm: $(cat "$work/reader.err")"
  [[ $(cat "$work/reader.out") == $'a\nb' ]] || fail "reader got: $(cat "$work/reader.out")"
  ;;

rm_live_invalid)
  # A live bus whose header no longer validates (a stray store into its
  # version word) is still in use: rm without --force refuses it, judged by
  # its users' locks, not by the header.
  new_bus bus
  "$producer" "$bus" --create --count 0 --keep-open 2>/dev/null || fail "create"
  "$producer" "$bus" --count 100000000 --rate 100 2>/dev/null &
  pids+=($!)
  for _ in $(seq 100); do
    "$inspect" show "$bus" --json 2>/dev/null | grep -Eq '"attached": *true' && break
    sleep 0.02
  done
  printf '\x09\0\0\0' | dd of="/dev/shm/shmbus.$bus" bs=1 seek=8 conv=notrunc status=none
  expect_failure rm 'not removed: in use by a live process' "$inspect" rm "$bus"
  [[ -e /dev/shm/shmbus.$bus ]] || fail "removed a live bus"
  "$inspect" rm "$bus" --force >/dev/null 2>&1 || fail "rm --force"
  [[ ! -e /dev/shm/shmbus.$bus ]] || fail "rm --force left it"
  ;;

table_full)
  # A full reader table is a clear one-line error naming the bus, and a slot
  # comes free again when its reader leaves.
  new_bus bus
  "$producer" "$bus" --create --max-readers 1 --count 0 --keep-open 2>/dev/null || fail "create"
  "$consumer" "$bus" --format none --count 1 >/dev/null 2>"$work/first.err" &
  pids+=($!)
  attached() { [[ $("$inspect" show "$bus" --interval 0 2>/dev/null) == *'(1 in use)'* ]]; }
  for _ in $(seq 200); do
    attached && break
    sleep 0.05
  done
  attached || fail "the first consumer did not attach"
  expect_failure second "bus '$bus'.*all 1 reader slots hold live readers" "$consumer" "$bus" --count 1
  printf 'x\n' | "$producer" "$bus" --keep-open 2>/dev/null || fail "publish"
  wait "${pids[-1]}" || fail "the first consumer failed: $(cat "$work/first.err")"
  "$consumer" "$bus" --count 1 >"$work/again.out" 2>/dev/null || fail "the freed slot is not reusable"
  grep -qx x "$work/again.out" || fail "the second consumer read $(cat "$work/again.out")"
  ;;

bad_names)
  # Every program refuses a name with '/', '..', a leading '.' or '-',
  # non-ASCII or control characters, or over 200 characters, naming why.
  # (A NUL cannot reach a program through argv; the library's BusNames.*
  # unit tests cover it.)
  long=$(printf 'n%.0s' $(seq 201))
  i=0
  for name in 'a/b' '../etc' 'a..b' '.hidden' $'tab\tname' 'été' "$long"; do
    i=$((i + 1))
    expect_failure "producer$i" 'invalid name' "$producer" --create --count 0 -- "$name"
    expect_failure "consumer$i" 'invalid name' "$consumer" -- "$name"
    expect_failure "inspect$i" 'invalid name' "$inspect" show -- "$name"
  done
  ;;

*)
  echo "unknown case $case_name" >&2
  exit 2
  ;;
esac
note "ok"
