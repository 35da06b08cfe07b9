#!/usr/bin/env bash
# Buses in a directory other than /dev/shm: --dir and SHMBUS_DIR in every
# program, the checks on a directory, and huge-page mounts (as root; skipped
# with exit 77 and the reason when a mount or huge pages are not available).
#   PRODUCER=... CONSUMER=... INSPECT=... [BRIDGE=...] [NATS=...] [BENCH=...] bus_dir_test.sh CASE
set -euo pipefail

case_name=${1:?usage: bus_dir_test.sh CASE}
: "${PRODUCER:?}" "${CONSUMER:?}" "${INSPECT:?}"

bus_prefix=cli
work_prefix=shmbus-cli
# shellcheck source=../lib/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/harness.sh"

# Private bus directories on tmpfs, removed at exit with what is in them.
dirs=()
mounts=()
saved_hugepages=
new_dir() {  # new_dir VAR
  local d
  d=$(mktemp -d /dev/shm/shmbus-clidir.XXXXXX)
  dirs+=("$d")
  printf -v "$1" '%s' "$d"
}
cleanup_dirs() {
  local m d
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || true; rmdir "$m" 2>/dev/null || true; done
  for d in "${dirs[@]}"; do rm -rf "$d"; done
  [[ -z "$saved_hugepages" ]] || echo "$saved_hugepages" >/proc/sys/vm/nr_hugepages
  cleanup
}
trap cleanup_dirs EXIT

skip() { echo "SKIP [$case_name]: $*" >&2; exit 77; }

# mount_private TYPE OPTIONS VAR: mounts a private TYPE file system, or skips.
mount_private() {
  [[ $(id -u) == 0 ]] || skip "not root: cannot mount $1"
  local d
  d=$(mktemp -d /tmp/shmbus-climnt.XXXXXX)
  if ! mount -t "$1" -o "$2" none "$d" 2>"$work/mount.err"; then
    rmdir "$d"
    skip "cannot mount $1 -o $2: $(cat "$work/mount.err")"
  fi
  mounts+=("$d")
  printf -v "$3" '%s' "$d"
}

free_hugepages() { cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0; }

case "$case_name" in

option_and_environment)  # a bus made in one directory is there, and only there
  new_dir a
  new_dir b
  new_bus bus
  "$PRODUCER" "$bus" --dir "$a" --create --count 100 2>"$work/p.err" || fail "producer --dir"
  [[ -f "$a/shmbus.$bus" ]] || fail "no $a/shmbus.$bus"
  [[ ! -e "/dev/shm/shmbus.$bus" ]] || fail "the bus was made in /dev/shm too"
  "$CONSUMER" "$bus" --dir "$a" --count 100 --verify --json >/dev/null 2>"$work/c1.json" || fail "consumer --dir"
  grep -q '"messages":100' "$work/c1.json" || fail "consumer --dir read: $(cat "$work/c1.json")"
  SHMBUS_DIR=$a "$CONSUMER" "$bus" --count 100 --json >/dev/null 2>"$work/c2.json" || fail "consumer SHMBUS_DIR"
  grep -q '"messages":100' "$work/c2.json" || fail "consumer with SHMBUS_DIR read: $(cat "$work/c2.json")"
  # --dir wins over SHMBUS_DIR.
  SHMBUS_DIR=$b "$CONSUMER" "$bus" --dir "$a" --count 1 >/dev/null 2>&1 || fail "--dir did not win over SHMBUS_DIR"
  # Not visible from another directory, nor from /dev/shm; the error names the real path.
  expect_failure other_dir "no such bus \($b/shmbus.$bus does not exist\)" "$CONSUMER" "$bus" --dir "$b"
  expect_failure env_dir "no such bus \($b/shmbus.$bus does not exist\)" env SHMBUS_DIR="$b" "$CONSUMER" "$bus"
  expect_failure dev_shm "no such bus \(/dev/shm/shmbus.$bus does not exist\)" "$CONSUMER" "$bus"
  # The inspector lists and shows it from its directory only.
  "$INSPECT" list --dir "$a" >"$work/list_a.out" 2>&1 || fail "list --dir"
  grep -q "^$bus " "$work/list_a.out" || grep -q "$bus" "$work/list_a.out" || fail "list --dir $a lacks $bus"
  "$INSPECT" --dir "$b" list >"$work/list_b.out" 2>&1 || fail "list --dir b"
  ! grep -q "$bus" "$work/list_b.out" || fail "list --dir $b shows $bus"
  grep -q "no shmbus segments in $b" "$work/list_b.out" || fail "empty list does not name $b"
  SHMBUS_DIR=$a "$INSPECT" list --json >"$work/list.json" || fail "list with SHMBUS_DIR"
  grep -q "\"segment\":\"$a/shmbus.$bus\"" "$work/list.json" || fail "list --json: $(cat "$work/list.json")"
  "$INSPECT" show "$bus" --dir "$a" --interval 0 >"$work/show.out" || fail "show --dir"
  grep -q "$a/shmbus.$bus" "$work/show.out" || fail "show does not name the path"
  grep -Eq "^  pages +tmpfs, 4 KiB pages$" "$work/show.out" || fail "show lacks the pages line: $(cat "$work/show.out")"
  "$INSPECT" show "$bus" --dir "$a" --interval 0 --json >"$work/show.json" || fail "show --json"
  grep -q '"pages":"tmpfs, 4 KiB pages"' "$work/show.json" || fail "show --json lacks pages"
  "$INSPECT" check "$bus" --dir "$a" >/dev/null || fail "check --dir"
  "$INSPECT" dump "$bus" --dir "$a" --count 2 >/dev/null || fail "dump --dir"
  "$INSPECT" metrics --dir "$a" >"$work/metrics.out" || fail "metrics --dir"
  grep -q "bus=\"$bus\"" "$work/metrics.out" || fail "metrics --dir lacks the bus"
  ;;

gc_and_rm)  # gc and rm act in the directory they are given
  new_dir a
  new_bus bus
  # A producer waiting for lines, a consumer killed while it holds a slot,
  # and a creation killed mid-way.
  mkfifo "$work/lines"
  "$PRODUCER" "$bus" --dir "$a" --create <"$work/lines" 2>/dev/null &
  producer=$!
  pids+=("$producer")
  exec 3>"$work/lines"
  for _ in $(seq 200); do [[ -e "$a/shmbus.$bus" ]] && break; sleep 0.02; done
  "$CONSUMER" "$bus" --dir "$a" --from latest >/dev/null 2>&1 &
  consumer=$!
  pids+=("$consumer")
  for _ in $(seq 200); do
    "$INSPECT" show "$bus" --dir "$a" --interval 0 --json 2>/dev/null | grep -q "\"pid\":$consumer" && break
    sleep 0.02
  done
  kill -9 "$consumer"
  wait "$consumer" 2>/dev/null || true
  echo half >"$a/.shmbus.$bus.QWERTY"
  "$INSPECT" gc "$bus" --dir "$a" >"$work/gc.out" || fail "gc --dir"
  grep -q "$a/.shmbus.$bus.QWERTY" "$work/gc.out" || fail "gc did not report the abandoned creation: $(cat "$work/gc.out")"
  [[ ! -e "$a/.shmbus.$bus.QWERTY" ]] || fail "gc left the abandoned creation"
  grep -qi "reclaimed" "$work/gc.out" || fail "gc did not reclaim the dead reader: $(cat "$work/gc.out")"
  expect_failure rm_elsewhere "no such bus" "$INSPECT" rm "$bus"
  [[ -e "$a/shmbus.$bus" ]] || fail "rm in /dev/shm removed the bus in $a"
  exec 3>&-  # end of input: the producer closes the bus and exits
  wait "$producer" || fail "producer failed"
  "$INSPECT" rm "$bus" --dir "$a" >"$work/rm.out" || fail "rm --dir"
  grep -q "removed $a/shmbus.$bus" "$work/rm.out" || fail "rm did not name the path: $(cat "$work/rm.out")"
  [[ ! -e "$a/shmbus.$bus" ]] || fail "rm --dir left the bus"
  ;;

refused)  # an unusable directory: one line naming it, non-zero exit, in every program
  new_dir a
  touch "$a/file"
  disk=
  for d in /var/tmp /tmp /var /usr; do
    t=$(stat -f -c %T "$d" 2>/dev/null || true)
    if [[ -n "$t" && "$t" != tmpfs && "$t" != hugetlbfs ]]; then disk=$d; break; fi
  done
  new_bus bus
  for bad in "$a/missing" "$a/file" ${disk:+"$disk"}; do
    case $bad in
      */missing) why="does not exist" ;;
      */file) why="is not a directory" ;;
      *) why="is on .*not tmpfs or hugetlbfs" ;;
    esac
    want="bus directory $bad $why"
    expect_failure producer "$want" "$PRODUCER" "$bus" --dir "$bad" --create --count 1
    expect_failure producer_env "$want" env SHMBUS_DIR="$bad" "$PRODUCER" "$bus" --create --count 1
    expect_failure consumer "$want" "$CONSUMER" "$bus" --dir "$bad"
    expect_failure inspect_list "$want" "$INSPECT" list --dir "$bad"
    expect_failure inspect_list_env "$want" env SHMBUS_DIR="$bad" "$INSPECT" list
    expect_failure inspect_gc "$want" "$INSPECT" gc "$bus" --dir "$bad"
    expect_failure inspect_rm "$want" "$INSPECT" rm "$bus" --dir "$bad"
    if [[ -n "${BRIDGE:-}" ]]; then
      expect_failure bridge "$want" "$BRIDGE" serve "$bus" --dir "$bad" --listen 127.0.0.1:0
    fi
    if [[ -n "${NATS:-}" ]]; then
      expect_failure nats "$want" "$NATS" out "$bus" --dir "$bad" --stream s
    fi
    if [[ -n "${BENCH:-}" ]]; then
      expect_failure bench "$want" "$BENCH" --dir "$bad" --quick
    fi
  done
  # JSON errors carry the code.
  "$PRODUCER" "$bus" --dir "$a/missing" --create --json 2>"$work/err.json" && fail "accepted a missing directory"
  grep -q '"code":"bad_directory"' "$work/err.json" || fail "json error: $(cat "$work/err.json")"
  ;;

bridge_and_nats)  # the bridge serves, and the gateway opens, the bus of their --dir
  [[ -n "${BRIDGE:-}" ]] || skip "shmbus-bridge not built"
  # shellcheck source=../bridge/serve_port.sh
  source "$(dirname "${BASH_SOURCE[0]}")/../bridge/serve_port.sh"
  new_dir a
  new_bus bus
  "$PRODUCER" "$bus" --dir "$a" --create --count 50 2>/dev/null
  expect_failure bridge_default "no such bus \(/dev/shm/shmbus.$bus" "$BRIDGE" serve "$bus" --listen 127.0.0.1:0
  "$BRIDGE" serve "$bus" --dir "$a" --listen 127.0.0.1:0 2>"$work/serve.log" &
  pids+=($!)
  port=$(serve_port "$work/serve.log" "$bus" 0 "${pids[-1]}") || fail "bridge serve --dir did not start"
  timeout 10 "$CONSUMER" "tcp://127.0.0.1:$port/$bus" --from earliest --count 50 --verify --json \
    >/dev/null 2>"$work/c.json" || fail "consumer over the bridge"
  grep -q '"messages":50' "$work/c.json" || fail "over the bridge: $(cat "$work/c.json")"
  if [[ -n "${NATS:-}" ]]; then
    new_dir b
    expect_failure nats_other_dir "no such bus \($b/shmbus.$bus does not exist\)" \
      "$NATS" out "$bus" --dir "$b" --stream s
  fi
  ;;

hugetlbfs)  # a bus on a private hugetlbfs mount: whole huge pages, and it says so
  mount_private hugetlbfs "pagesize=2M,mode=0700" huge
  if (($(free_hugepages) < 4)); then
    saved_hugepages=$(cat /proc/sys/vm/nr_hugepages)
    echo $((saved_hugepages + 4)) >/proc/sys/vm/nr_hugepages 2>/dev/null || true
    (($(free_hugepages) >= 4)) || skip "cannot raise /proc/sys/vm/nr_hugepages to get 4 free 2 MiB pages"
  fi
  new_bus bus
  "$PRODUCER" "$bus" --dir "$huge" --create --capacity 1024 --record-size 256 --count 5000 2>"$work/p.err" \
    || fail "producer on hugetlbfs"
  size=$(stat -c %s "$huge/shmbus.$bus")
  ((size % (2 * 1024 * 1024) == 0)) || fail "segment of $size bytes is not whole 2 MiB pages"
  "$CONSUMER" "$bus" --dir "$huge" --from earliest --count 1024 --json >/dev/null 2>"$work/c.json" \
    || fail "consumer on hugetlbfs"
  "$INSPECT" show "$bus" --dir "$huge" --interval 0 >"$work/show.out" || fail "show on hugetlbfs"
  grep -Eq "^  pages +hugetlbfs, 2 MiB huge pages$" "$work/show.out" || fail "show: $(cat "$work/show.out")"
  "$INSPECT" check "$bus" --dir "$huge" >/dev/null || fail "check on hugetlbfs"
  # More than the free pages: refused at creation, naming the cure.
  new_bus big
  expect_failure too_big "cannot reserve .* in $huge: .*nr_hugepages" \
    "$PRODUCER" "$big" --dir "$huge" --create --capacity 65536 --record-size 65536 --count 1
  [[ ! -e "$huge/shmbus.$big" ]] || fail "a refused bus was left behind"
  "$INSPECT" rm "$bus" --dir "$huge" >/dev/null || fail "rm on hugetlbfs"
  ;;

thp_tmpfs)  # a tmpfs mounted huge=always says what it gives
  policy=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null || true)
  [[ -n "$policy" ]] || skip "no transparent huge pages in this kernel"
  [[ "$policy" != deny ]] || skip "shmem_enabled is deny"
  mount_private tmpfs "huge=always,size=64m,mode=0700" thp
  new_bus bus
  "$PRODUCER" "$bus" --dir "$thp" --create --count 10 2>/dev/null || fail "producer on huge=always tmpfs"
  "$INSPECT" show "$bus" --dir "$thp" --interval 0 >"$work/show.out" || fail "show"
  grep -Eq "^  pages +tmpfs huge=always, 2 MiB transparent huge pages where aligned$" "$work/show.out" \
    || fail "show: $(cat "$work/show.out")"
  ;;

*)
  fail "unknown case $case_name"
  ;;
esac
echo "PASS [$case_name]"
