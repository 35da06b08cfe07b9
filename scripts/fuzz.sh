#!/usr/bin/env bash
# Fuzzes every libFuzzer target for a bounded time and fails on any crash,
# hang (10 s per input) or sanitizer report. Installs clang and libFuzzer
# when missing, builds the targets with ASan + UBSan in BUILD_DIR, then runs
# the three side by side, each on its own private 32 MiB tmpfs
# (tests/fuzz/run.sh), starting from the checked-in corpora:
#   segment  arbitrary bytes as a whole segment file        tests/fuzz/corpus/segment
#   record   arbitrary records in a valid bus               tests/fuzz/corpus/record
#   bridge   the TCP bridge's frame and handshake decoder   tests/bridge/fuzz_corpus
# An input that fails is kept in BUILD_DIR/artifacts; replay it with
#   BUILD_DIR/tests/fuzz/shmbus-fuzz-TARGET FILE
#
#   scripts/fuzz.sh [SECONDS] [BUILD_DIR]       (defaults: 60, build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build=${2:-build-fuzz}
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS must be a positive integer, not '$seconds'" >&2; exit 2; }

scripts/install-deps.sh fuzz
# -O1 with line tables (-gline-tables-only): what libFuzzer's documentation
# builds with; a finding's stack still names file:line.
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  -DSHMBUS_FUZZ=ON -DSHMBUS_SANITIZE=address,undefined -DSHMBUS_BUILD_TESTS=OFF \
  -DSHMBUS_BUILD_PROGRAMS=OFF -DSHMBUS_BUILD_BENCH=OFF -DSHMBUS_INSTALL=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target shmbus-fuzz-segment shmbus-fuzz-record shmbus-fuzz-bridge

declare -A corpus=(
  [segment]=tests/fuzz/corpus/segment
  [record]=tests/fuzz/corpus/record
  [bridge]=tests/bridge/fuzz_corpus
)
pids=() names=()
for t in segment record bridge; do
  ARTIFACTS=$build/artifacts tests/fuzz/run.sh "$build/tests/fuzz/shmbus-fuzz-$t" "${corpus[$t]}" "$seconds" &
  pids+=($!) names+=("$t")
done
failed=()
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed+=("${names[$i]}")
done
if ((${#failed[@]})); then
  echo "fuzz.sh: ${failed[*]} failed; inputs in $build/artifacts" >&2
  exit 1
fi
echo "fuzz.sh: segment, record and bridge each fuzzed for $seconds s (side by side on $(nproc) CPUs), no finding" >&2
