#!/usr/bin/env bash
# Runs one libFuzzer program for a bounded time, on a private 32 MiB tmpfs
# mounted over /dev/shm (unshare -m), so no input can fill the machine's
# /dev/shm. Fails on any crash, hang (10 s per input) or sanitizer report;
# the input that did it is kept in ARTIFACTS (default: ./fuzz-artifacts).
#   tests/fuzz/run.sh FUZZER CORPUS_DIR SECONDS
# The programs and their corpora (build: docs/building.md):
#   shmbus-fuzz-segment tests/fuzz/corpus/segment   a mapped segment's validation
#   shmbus-fuzz-record  tests/fuzz/corpus/record    record framing
#   shmbus-fuzz-bridge  tests/bridge/fuzz_corpus    the bridge's frame and handshake decoder
set -euo pipefail
fuzzer=${1:?usage: run.sh FUZZER CORPUS_DIR SECONDS}
corpus=${2:?}
seconds=${3:?}
artifacts=${ARTIFACTS:-$PWD/fuzz-artifacts}
mkdir -p "$artifacts"
work=$(mktemp -d "${TMPDIR:-/tmp}/shmbus-fuzz.XXXXXX")  # new inputs; the checked-in corpus stays as it is
trap 'rm -rf "$work"' EXIT
name=$(basename "$fuzzer")
cmd=("$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384
     -print_final_stats=1 -print_funcs=0 -artifact_prefix="$artifacts/$name-" "$work" "$corpus")
log=$work/log
rc=0
if [[ $(id -u) -eq 0 ]] && unshare -m true 2>/dev/null; then
  unshare -m bash -c 'mount -t tmpfs -o size=32m,mode=1777 tmpfs /dev/shm && exec "$@"' _ "${cmd[@]}" >"$log" 2>&1 || rc=$?
else
  echo "$name: not root (or no unshare): fuzzing on the real /dev/shm" >&2
  "${cmd[@]}" >"$log" 2>&1 || rc=$?
fi
execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo '?')
if [[ $rc -ne 0 ]]; then
  tail -n 60 "$log" >&2
  echo "$name: FAILED (exit $rc) after $execs executions; inputs kept in $artifacts" >&2
  exit 1
fi
echo "$name: $execs executions in $seconds s, coverage $cov edges, no crash, hang or sanitizer report" >&2
