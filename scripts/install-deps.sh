#!/usr/bin/env bash
# Installs what shmbus needs to build, test and benchmark, from Debian's packages.
# Safe to run again: packages already present are skipped.
#   scripts/install-deps.sh          what the build and the test suite need
#   scripts/install-deps.sh fuzz     that, plus clang and libFuzzer (scripts/fuzz.sh)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libboost-dev                       # Boost.Interprocess, Boost.Asio (header-only)
  libssl-dev openssl                 # TLS for shmbus-bridge (Asio SSL); the tests make certificates with openssl
  libgtest-dev libgmock-dev          # GoogleTest
  libbenchmark-dev                   # Google Benchmark
  libcli11-dev                       # argument parsing
  libfmt-dev                         # formatting
  nlohmann-json3-dev                 # --json output
  libzmq3-dev cppzmq-dev             # ZeroMQ, the benchmark's comparison transport
  procps                             # ps/pgrep used by tests
  help2man                           # man pages generated from --help
  man-db groff-base                  # man -l renders them in the tests
  zsh                                # the zsh completion's test
  python3-dev python3-pybind11 pybind11-dev   # the Python module
  python3-venv                       # pip install of the module into a venv, in the tests
  python3-pytest                     # its tests
  python3-numpy                      # the tests' check that numpy reads a message's view without a copy
  mypy                               # type-checks typed programs against the stubs in the tests
  python3-prometheus-client          # parses shmbus-inspect metrics in the tests
  curl                               # scrapes the metrics endpoint in the tests
  prometheus                         # promtool: checks every exporter's text and the alert rules (docs/alerts.yml) in the tests
  libnats-dev                        # NATS C client: shmbus-nats (the JetStream gateway)
  nats-server                        # NATS server with JetStream: shmbus-nats tests and benchmark
  systemd                            # systemd-analyze verify on the units of systemd/ (installs without systemd running)
)
if [[ ${1:-} == fuzz ]]; then
  packages+=(clang-14 libclang-rt-14-dev)   # libFuzzer and clang's sanitizer runtimes
  packages+=(util-linux)                    # unshare: each fuzzer on a private tmpfs
fi
# Optional, not installed here: python3-matplotlib (or gnuplot-nox) for the
# benchmark charts of bench/plot.py; scripts/bench.sh installs it when missing.

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
