#!/usr/bin/env bash
# The command-line pair against the reference ring, in alternating rounds:
#   shmbus-producer --create --count N --size 128   (pinned to the first CPU)
#   shmbus-consumer --verify --format none --json   (pinned to the second)
# then shmbus-bench's reference ring, 1 -> 1, 128 B, N messages, same CPUs.
# Prints each round and the medians with their ratio.
#   scripts/cli-pair.sh [--build DIR] [--rounds R] [--count N] [--cpus A,B]
set -euo pipefail
build=build rounds=5 count=10000000 cpus=0,1
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cli-pair.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
for p in producer/shmbus-producer consumer/shmbus-consumer bench/shmbus-bench; do
  [[ -x $build/$p ]] || { echo "cli-pair.sh: $build/$p is missing (build first)" >&2; exit 1; }
done
pcpu=${cpus%%,*} ccpu=${cpus##*,}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

for ((r = 1; r <= rounds; r++)); do
  bus=cli-pair-$$-$r
  taskset -c "$ccpu" "$build/consumer/shmbus-consumer" "$bus" --wait-for-bus 10s --verify --format none \
    --json 2>"$tmp/consumer.json" &
  consumer=$!
  taskset -c "$pcpu" "$build/producer/shmbus-producer" "$bus" --create --count "$count" --size 128 \
    --wait-for-readers 1 2>/dev/null
  wait "$consumer" || { echo "cli-pair.sh: the consumer failed:" >&2; cat "$tmp/consumer.json" >&2; exit 1; }
  "$build/inspector/shmbus-inspect" rm "$bus" >/dev/null 2>&1 || true
  cli=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["verify"]["ok"] and j["messages"]==int(sys.argv[2]); print(j["msgs_per_sec"])' \
    "$tmp/consumer.json" "$count")
  "$build/bench/shmbus-bench" --transports ring --modes full --consumers 1 --sizes 128 --count "$count" \
    --runs 1 --cpus "$cpus" --json "$tmp/ring.json" >/dev/null 2>&1
  ring=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["results"][0]["median"]["per_consumer_msgs_per_s"])' \
    "$tmp/ring.json")
  echo "$cli" >>"$tmp/cli"
  echo "$ring" >>"$tmp/ring"
  python3 -c 'import sys; c,r=map(float,sys.argv[1:3]); print(f"round {sys.argv[3]}: CLI pair {c/1e6:.2f} M msgs/s, ring {r/1e6:.2f} M, ratio {c/r:.2f}")' \
    "$cli" "$ring" "$r"
done
cli=$(median <"$tmp/cli") ring=$(median <"$tmp/ring")
python3 -c 'import sys; c,r=map(float,sys.argv[1:3]); print(f"median of {sys.argv[3]} rounds: CLI pair {c/1e6:.2f} M msgs/s verified, ring {r/1e6:.2f} M: {c/r:.2f}x the ring")' \
  "$cli" "$ring" "$rounds"
