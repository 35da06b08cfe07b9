# shellcheck shell=bash
# What the shell-driven test cases share (tests/cli, tests/security): a work
# directory, bus names removed at exit, child processes killed at exit,
# failure reports, and the check that a program failed with one line.
# The sourcing script sets, before sourcing:
#   case_name   the case being run (names buses, prefixes messages)
#   bus_prefix  e.g. "cli": buses are PREFIX-CASE-PID-N
#   work_prefix e.g. "shmbus-cli": the work directory's name

work=$(mktemp -d "${TMPDIR:-/tmp}/${work_prefix}.XXXXXX")
buses=()
pids=()

# new_bus VAR: sets VAR to a bus name unique to this test process (removed at exit).
new_bus() {
  local b="${bus_prefix}-${case_name//_/-}-$$-${#buses[@]}"
  buses+=("$b")
  rm -f "/dev/shm/shmbus.$b"
  printf -v "$1" '%s' "$b"
}

cleanup() {
  local p b
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for b in "${buses[@]}"; do rm -f "/dev/shm/shmbus.$b"; done
  rm -rf "$work"
}
trap cleanup EXIT

# fail MESSAGE: reports the failure with the tail of every output file kept
# in the work directory, and exits 1.
fail() {
  echo "FAIL [$case_name]: $*" >&2
  local f
  for f in "$work"/*; do
    [[ -f "$f" && ! -x "$f" ]] || continue
    echo "---- $(basename "$f") (last 20 lines)" >&2
    tail -n 20 "$f" | cut -c1-300 >&2
  done
  exit 1
}

note() { echo "[$case_name] $*" >&2; }

# expect_failure NAME REGEX CMD...: CMD exits non-zero (not by a signal) with
# exactly one line on stderr, matching REGEX (extended, case-insensitive), and
# nothing on stdout. Its exit code is left in LAST_RC.
expect_failure() {
  local name=$1 regex=$2
  shift 2
  local rc=0
  "$@" >"$work/$name.out" 2>"$work/$name.err" </dev/null || rc=$?
  [[ $rc -ne 0 ]] || fail "$name: expected a non-zero exit, got 0"
  [[ $rc -lt 128 ]] || fail "$name: killed by signal $((rc - 128))"
  local lines
  lines=$(wc -l <"$work/$name.err")
  [[ $lines -eq 1 ]] || fail "$name: expected one line on stderr, got $lines"
  grep -Eiq -- "$regex" "$work/$name.err" || fail "$name: stderr does not match /$regex/: $(cat "$work/$name.err")"
  [[ ! -s "$work/$name.out" ]] || fail "$name: stdout not empty"
  note "$name: rc=$rc: $(cat "$work/$name.err")"
  LAST_RC=$rc
}
