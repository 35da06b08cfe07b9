#!/usr/bin/env bash
# Soak test, on demand (not in CI): one producer publishes --messages
# synthetic messages (or runs for --minutes) while 4 verifying consumers
# read them; every --restart-every seconds one consumer, chosen at random,
# is killed with SIGKILL and a new one attached from the latest record.
# Every consumer checks every message it gets (gaps, duplicates,
# checksums). Records the bus's head once a second and reports throughput
# over time (CSV and an SVG chart) and the totals; also the producer's fd
# count and RSS, which must stay flat.
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
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
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
now_ms() { echo $(($(date +%s%N) / 1000000)); }
t0=$SECONDS t0_ms=$(now_ms) last_ms=$t0_ms last_head=0 restarts=0 failures=0 next_restart=$restart_every
while kill -0 "$prod" 2>/dev/null; do
  sleep 1
  el=$((SECONDS - t0))
  head=$("$inspect" show "$bus" --json --interval 0 2>/dev/null | grep -o '"head": *[0-9]*' | head -1 | grep -o '[0-9]*$' || true)
  head=${head:-$last_head}
  # The producer may have finished since kill -0: under pipefail a failed
  # ls must not end the script (it would skip the totals).
  fds=$( (ls "/proc/$prod/fd" 2>/dev/null || true) | wc -l)
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$prod/status" 2>/dev/null || true)
  ((fds > 0)) || break  # the producer is gone: no sample of it
  # A sample takes longer than the 1 s sleep (shmbus-inspect runs each
  # time): the rate is over the time that really passed.
  ms=$(now_ms)
  echo "$(((ms - t0_ms) / 1000)).$(((ms - t0_ms) % 1000 / 100)),$head,$(((head - last_head) * 1000 / (ms > last_ms ? ms - last_ms : 1))),$fds,${rss:-0},$restarts" >>"$csv"
  last_head=$head last_ms=$ms
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
# Throughput range over the full samples (the first and last are partial).
rate_range=$(awk -F, 'NR > 2 {print $3}' "$csv" | sed '$d' | sort -n | awk '{v[NR] = $1} END {if (NR) printf "%d..%d (median %d)", v[1], v[NR], v[int((NR + 1) / 2)]}')
echo "soak: $published messages in $secs s ($((published / (secs > 0 ? secs : 1))) msgs/s; per second: ${rate_range:-no samples}), 4 verifying consumers, $restarts consumer restarts (SIGKILL); $verified messages verified by consumers that finished, $lost lost, $errors consumers with verification errors, $failures processes failed; producer fds $fd_range, RSS $rss_range KiB" | tee "$out/summary.txt" >&2

# The chart: an SVG drawn by plain Python (no plotting package needed).
python3 - "$csv" "$out/throughput.svg" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
t = [float(r["seconds"]) for r in rows]
m = [int(r["msgs_per_s"]) / 1e6 for r in rows]
rs = [int(r["restarts"]) for r in rows]
W, H, L, R, T, B = 900, 340, 60, 20, 40, 45
tmax = max(t + [1.0])
top = max(m + [0.1]) * 1.1
x = lambda v: L + (W - L - R) * v / tmax
y = lambda v: H - B - (H - T - B) * v / top
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
       '<rect width="100%" height="100%" fill="white"/>',
       '<text x="10" y="18" font-size="13">shmbus soak: messages per second (producer head, sampled each second), 4 verifying consumers</text>']
for i in range(6):
    v = top * i / 5
    out.append(f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
    out.append(f'<text x="{L - 5}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f} M</text>')
for i in range(11):
    v = tmax * i / 10
    out.append(f'<text x="{x(v):.1f}" y="{H - B + 15}" text-anchor="middle">{v:.0f}</text>')
out.append(f'<text x="{(L + W - R) / 2}" y="{H - 8}" text-anchor="middle">seconds (dashed: a consumer SIGKILLed and restarted)</text>')
for i in range(1, len(rows)):
    if rs[i] != rs[i - 1]:
        out.append(f'<line x1="{x(t[i]):.1f}" x2="{x(t[i]):.1f}" y1="{T}" y2="{H - B}" stroke="#e88" stroke-dasharray="3,3"/>')
pts = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in zip(t, m))
out.append(f'<polyline fill="none" stroke="#1f5fa8" stroke-width="1.5" points="{pts}"/>')
out.append(f'<line x1="{L}" x2="{L}" y1="{T}" y2="{H - B}" stroke="black"/><line x1="{L}" x2="{W - R}" y1="{H - B}" y2="{H - B}" stroke="black"/>')
out.append('</svg>')
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
echo "soak: chart in $out/throughput.svg" >&2
((errors == 0 && failures == 0))
