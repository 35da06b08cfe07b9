#!/usr/bin/env bash
# The benchmark in one command: installs what is missing, builds shmbus
# (Release), runs shmbus-bench's standard matrix against Boost.Interprocess
# message_queue, a Unix domain socket, a pipe and ZeroMQ PUB/SUB (medians of
# RUNS runs, default 5), then the micro-benchmarks, then draws the charts.
#
#   scripts/bench.sh [OUTDIR] [extra shmbus-bench options...]
#
# OUTDIR (default bench/results) receives results.md (the table),
# results.json, micro.txt, micro.json, throughput.png, latency.png.
# Environment: RUNS (5), BUILD_DIR (build-bench), MICRO=0 to skip the
# micro-benchmarks, CHARTS=0 to skip the charts.
# The TCP bridge against a plain loopback socket is not in the
# standard matrix (full and rate modes only); run it on its own, under a minute:
#   build-bench/bench/shmbus-bench --transports bridge,tcp --modes full,rate \
#     --consumers 1 --sizes 128 --runs 5 --cpus 0,1
# Takes ~15-25 minutes on 2 cores. Run it on a quiet machine: every transport
# here is sensitive to other load, shmbus's spinning consumers most of all.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

out=${1:-bench/results}
shift || true
build=${BUILD_DIR:-build-bench}
runs=${RUNS:-5}

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHMBUS_BUILD_BENCH=ON >&2
cmake --build "$build" -j"$(nproc)" --target shmbus-bench shmbus-micro >&2
mkdir -p "$out"

status=0
"$build/bench/shmbus-bench" --runs "$runs" --modes full,rate,pingpong,idle \
  --consumers 1,2,4 --sizes 32,128,1024 --rate 100000 \
  --json "$out/results.json" "$@" > "$out/results.md" || status=$?
cat "$out/results.md"

if [[ ${MICRO:-1} != 0 && -x "$build/bench/shmbus-micro" ]]; then
  "$build/bench/shmbus-micro" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/micro.json" --benchmark_out_format=json | tee "$out/micro.txt"
fi

if [[ ${CHARTS:-1} != 0 ]]; then
  # Debian's matplotlib lives in the system python, which pyenv/venvs may shadow.
  py=python3
  [[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
  if ! "$py" -c 'import matplotlib' 2>/dev/null && ! command -v gnuplot >/dev/null; then
    echo "charts need python3-matplotlib or gnuplot-nox; installing python3-matplotlib" >&2
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO=sudo
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-matplotlib >&2 || true
  fi
  "$py" bench/plot.py "$out/results.json" "$out" || echo "charts skipped (see above)" >&2
fi
exit "$status"
