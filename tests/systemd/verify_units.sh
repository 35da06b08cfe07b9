#!/usr/bin/env bash
# verify_units.sh ANALYZE BIN_DIR UNIT_DIR INSTALL_UNIT_DIR INSTALL_BINDIR "UNIT;UNIT..." PROGRAM...
# Links each PROGRAM into BIN_DIR, runs systemd-analyze verify on each unit
# of UNIT_DIR (configured with ExecStart in BIN_DIR) and fails on any message
# it prints, a warning included; then checks that the units cmake --install
# installs (INSTALL_UNIT_DIR) are the same but for INSTALL_BINDIR.
# Exit 77 (skipped) without systemd-analyze.
set -euo pipefail
analyze=$1 bin_dir=$2 unit_dir=$3 install_unit_dir=$4 install_bindir=$5
IFS=';' read -r -a units <<<"$6"
shift 6

if [[ -z $analyze || $analyze == *-NOTFOUND ]]; then
  echo "SKIP: systemd-analyze not found (Debian: apt-get install systemd); the units were not verified"
  exit 77
fi

mkdir -p "$bin_dir"
for program in "$@"; do
  ln -sfn "$program" "$bin_dir/$(basename "$program")"
done

failed=0
for unit in "${units[@]}"; do
  # --man=no: the units name no Documentation= pages to look for.
  if out=$(cd "$unit_dir" && SYSTEMD_LOG_COLOR=0 "$analyze" verify --man=no "./$unit" 2>&1) && [[ -z $out ]]; then
    echo "ok: $unit"
  else
    echo "FAILED: systemd-analyze verify $unit_dir/$unit"
    echo "$out"
    failed=1
  fi
  installed=$install_unit_dir/$unit
  if ! grep -q "^ExecStart=$install_bindir/shmbus-" "$installed"; then
    echo "FAILED: $installed does not start a program of $install_bindir"
    failed=1
  fi
  if ! diff <(sed "s|$install_bindir/|BINDIR/|g" "$installed") <(sed "s|$bin_dir/|BINDIR/|g" "$unit_dir/$unit"); then
    echo "FAILED: $installed and $unit_dir/$unit differ in more than the programs' directory"
    failed=1
  fi
done
((failed == 0)) && echo "all ${#units[@]} units verified"
exit $failed
