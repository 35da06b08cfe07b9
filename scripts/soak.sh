#!/usr/bin/env bash
# Soak test, on demand (not in CI): one producer publishes --messages
# synthetic messages (or runs for --minutes) while 4 verifying consumers
# read them; every --restart-every seconds one consumer, chosen at random,
# is killed with SIGKILL and a new one attached from the latest record.
# Every consumer checks every message it gets (gaps, duplicates,
# checksums). Records the bus's head once a second and reports throughput
# over time (CSV, and a chart when python3-matplotlib is installed) and the
# totals; also the producer's fd count and RSS, which must stay flat.
#
#   scripts/soak.sh [--messages N] [--minutes M] [--size B] [--restart-every S] [--out DIR]
#
# Defaults: 1e9 messages or 30 minutes, whichever comes first; 128-byte
# messages; a restart every 20 s; results in soak-results/.
set -euo pipefail
cd "$(dirname "$0")/.."

messages=1000000000 minutes=30 size=128 restart_every=20 out=soak-results build=build
while (($#)); do
  case $1 in
    --messages) messages=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --restart-every) restart_every=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "soak.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

if [[ ! -x $build/producer/shmbus-producer ]]; then
  scripts/install-deps.sh
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"$(nproc)"
fi
producer=$build/producer/shmbus-producer
consumer=$build/consumer/shmbus-consumer
inspect=$build/inspector/shmbus-inspect
mkdir -p "$out"
bus=soak-$$
pids=()
cleanup() {
  local p
  for p in "${pids[@]}" "${prod:-}"; do [[ -n $p ]] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -f "/dev/shm/shmbus.$bus"
}
trap cleanup EXIT

"$producer" "$bus" --create --capacity 65536 --record-size 256 --count 0 --keep-open 2>/dev/null
declare -A slot_pid
start_consumer() {  # start_consumer K FROM
  "$consumer" "$bus" --name "soak-$1" --from "$2" --verify --format none --json \
    >/dev/null 2>"$out/consumer-$1-$(date +%s%N).json" &
  slot_pid[$1]=$!
  pids+=($!)
}
for k in 0 1 2 3; do start_consumer "$k" earliest; done
sleep 0.5
"$producer" "$bus" --count "$messages" --size "$size" --json 2>"$out/producer.json" &
prod=$!

csv=$out/throughput.csv
echo "seconds,head,msgs_per_s,producer_fds,producer_rss_kib,restarts" >"$csv"
t0=$SECONDS last_head=0 restarts=0 failures=0 next_restart=$restart_every
while kill -0 "$prod" 2>/dev/null; do
  sleep 1
  el=$((SECONDS - t0))
  head=$("$inspect" show "$bus" --json --interval 0 2>/dev/null | grep -o '"head": *[0-9]*' | head -1 | grep -o '[0-9]*$' || echo "$last_head")
  fds=$(ls "/proc/$prod/fd" 2>/dev/null | wc -l)
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$prod/status" 2>/dev/null || echo 0)
  echo "$el,$head,$((head - last_head)),$fds,$rss,$restarts" >>"$csv"
  last_head=$head
  if ((el >= next_restart)); then
    k=$((RANDOM % 4))
    kill -9 "${slot_pid[$k]}" 2>/dev/null || true
    wait "${slot_pid[$k]}" 2>/dev/null || true
    start_consumer "$k" latest
    restarts=$((restarts + 1))
    next_restart=$((el + restart_every))
  fi
  if ((el >= minutes * 60)); then kill -INT "$prod"; break; fi
done
wait "$prod" || failures=$((failures + 1))
for k in 0 1 2 3; do wait "${slot_pid[$k]}" || failures=$((failures + 1)); done

# Totals: the producer's summary and every consumer's (killed ones left none).
verified=0 lost=0 errors=0
for f in "$out"/consumer-*.json; do
  [[ -s $f ]] || continue
  verified=$((verified + $(grep -o '"messages":[0-9]*' "$f" | grep -o '[0-9]*$' || echo 0)))
  lost=$((lost + $(grep -o '"lost":[0-9]*' "$f" | head -1 | grep -o '[0-9]*$' || echo 0)))
  grep -q '"ok":true' "$f" || errors=$((errors + 1))
done
published=$(grep -o '"messages":[0-9]*' "$out/producer.json" | grep -o '[0-9]*$' || echo 0)
secs=$((SECONDS - t0))
fd_range=$(awk -F, 'NR > 2 {print $4}' "$csv" | sort -n | sed -n '1p;$p' | paste -sd- -)
rss_range=$(awk -F, 'NR > 2 {print $5}' "$csv" | sort -n | sed -n '1p;$p' | paste -sd- -)
echo "soak: $published messages in $secs s ($((published / (secs > 0 ? secs : 1))) msgs/s), 4 verifying consumers, $restarts consumer restarts; $verified messages verified by consumers that finished, $lost lost, $errors consumers with verification errors, $failures processes failed; producer fds $fd_range, RSS $rss_range KiB" | tee "$out/summary.txt" >&2

if python3 -c 'import matplotlib' 2>/dev/null; then
  python3 - "$csv" "$out/throughput.png" <<'PY'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
t = [int(r["seconds"]) for r in rows]
m = [int(r["msgs_per_s"]) / 1e6 for r in rows]
plt.figure(figsize=(8, 3))
plt.plot(t, m)
plt.xlabel("seconds"); plt.ylabel("M msgs/s"); plt.title("shmbus soak: throughput, 4 verifying consumers")
plt.tight_layout(); plt.savefig(sys.argv[2])
PY
  echo "soak: chart in $out/throughput.png" >&2
fi
((errors == 0 && failures == 0))
