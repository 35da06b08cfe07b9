# shellcheck shell=bash
# serve_port LOG BUS [WANT [PID]]: waits up to 20 s for `shmbus-bridge serve
# BUS` to announce its port in LOG, and prints it. A LOG that restarts append
# to is read for its last announcement; with WANT (not 0) only that port
# counts; with PID, a server that exited ends the wait at once. Returns 1 if
# no port came. LOG need not exist yet (serve may not have opened it).
serve_port() {
  local log=$1 bus=$2 want=${3:-0} pid=${4:-} p
  for _ in $(seq 400); do
    p=$(sed -n "s/.*serving bus '$bus' on [^ ]*:\([0-9]*\) .*/\1/p" "$log" 2>/dev/null | tail -n 1 || true)
    if [[ -n "$p" && ("$want" == 0 || "$p" == "$want") ]]; then
      echo "$p"
      return 0
    fi
    [[ -z "$pid" ]] || kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
