#!/usr/bin/env bash
# End-to-end tests of what makes the programs finished tools: the man pages,
# the shell completion, and shmbus-inspect reset. One case per ctest test:
#   PRODUCER=... CONSUMER=... INSPECT=... PROGRAMS="..." MAN_DIR=... \
#   COMPLETION_BASH=... COMPLETION_ZSH=... tools_test.sh CASE
# PROGRAMS lists every built program (paths). A case whose tool is missing
# (groff or man, zsh) exits 77: skipped.
set -euo pipefail

case_name=${1:?usage: tools_test.sh CASE}
: "${PRODUCER:?set PRODUCER to the shmbus-producer binary}"
: "${CONSUMER:?set CONSUMER to the shmbus-consumer binary}"
: "${INSPECT:?set INSPECT to the shmbus-inspect binary}"

bus_prefix=cli
work_prefix=shmbus-tools
# shellcheck source=../lib/harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/harness.sh"

# subcommands PROGRAM: the subcommands its --help lists, one a line.
subcommands() {
  "$1" --help | awk '/^Subcommands:$/ { on = 1; next } on && /^  [^ ]/ { print $1; next } on { on = 0 }'
}

# long_options PROGRAM [SUBCOMMAND]: the --long options its --help lists.
long_options() {
  "$@" --help | grep -oE '^  (-[A-Za-z],)?--[a-z0-9-]+' | sed -E 's/^  (-[A-Za-z],)?//' | sort -u
}

# json_field FILE KEY: the value of a top-level number or string KEY.
json_field() { grep -oE "\"$2\":(\"[^\"]*\"|[0-9]+|null)" "$1" | head -n1 | cut -d: -f2- | tr -d '"'; }

case "$case_name" in

reset)  # shmbus-inspect reset moves a remembered name; a resuming consumer starts there
  new_bus bus
  seq 0 9 | "$PRODUCER" "$bus" --create --capacity 64 --record-size 64 --timestamps precise --keep-open 2>/dev/null
  sleep 0.05
  between=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
  sleep 0.05
  seq 10 19 | "$PRODUCER" "$bus" --timestamps precise --keep-open 2>/dev/null
  "$CONSUMER" "$bus" --name r --count 15 >/dev/null 2>&1

  "$INSPECT" reset "$bus" --reader r --to earliest >"$work/earliest" 2>&1 || fail "earliest: $(cat "$work/earliest")"
  grep -q "^bus '$bus': reader name 'r' moved from seq 15 to seq 0 (earliest" "$work/earliest" ||
    fail "earliest said: $(cat "$work/earliest")"
  [[ $(wc -l <"$work/earliest") -eq 1 ]] || fail "not one line: $(cat "$work/earliest")"
  [[ $("$CONSUMER" "$bus" --name r --count 1 2>/dev/null) == 0 ]] || fail "earliest: did not resume at 0"

  "$INSPECT" reset "$bus" --reader r --to 7 --json >"$work/seq.json" || fail "7: $(cat "$work/seq.json")"
  [[ $(json_field "$work/seq.json" from) == 1 && $(json_field "$work/seq.json" to) == 7 &&
     $(json_field "$work/seq.json" target) == sequence ]] || fail "--json: $(cat "$work/seq.json")"
  [[ $("$CONSUMER" "$bus" --name r --count 1 2>/dev/null) == 7 ]] || fail "7: did not resume at 7"

  "$INSPECT" reset "$bus" --reader r --to "$between" >"$work/time" 2>&1 || fail "time: $(cat "$work/time")"
  grep -q "moved from seq 8 to seq 10 (the first message stamped at or after" "$work/time" ||
    fail "time said: $(cat "$work/time")"
  [[ $("$CONSUMER" "$bus" --name r --count 1 2>/dev/null) == 10 ]] || fail "time: did not resume at 10"
  # The time as dump prints it is taken too.
  "$INSPECT" reset "$bus" --reader r --to "$(date -u -d "${between%Z}" '+%Y-%m-%d %H:%M:%S.%N UTC')" >/dev/null ||
    fail "a time written as dump prints it was refused"

  "$INSPECT" reset "$bus" --reader r --to latest >"$work/latest" 2>&1 || fail "latest: $(cat "$work/latest")"
  grep -q "to seq 20 (latest" "$work/latest" || fail "latest said: $(cat "$work/latest")"
  echo newest | "$PRODUCER" "$bus" --keep-open 2>/dev/null
  [[ $("$CONSUMER" "$bus" --name r --count 1 2>/dev/null) == newest ]] || fail "latest: did not resume at the next message"

  # Refusals: one line, exit 1 (2 for a bad --to), and the name stays where it was.
  "$INSPECT" reset "$bus" --reader r --to 3 >/dev/null
  expect_failure beyond "bus '$bus': sequence 99 is not retained \(the bus holds 0\.\.20\)" \
    "$INSPECT" reset "$bus" --reader r --to 99
  [[ $LAST_RC -eq 1 ]] || fail "beyond: exit $LAST_RC"
  expect_failure unknown "no remembered reader named 'nobody'" "$INSPECT" reset "$bus" --reader nobody --to 0
  expect_failure bad_to "--to: 'yesterday' is not earliest, latest, a sequence number, or a time" \
    "$INSPECT" reset "$bus" --reader r --to yesterday
  [[ $LAST_RC -eq 2 ]] || fail "bad --to: exit $LAST_RC"
  "$CONSUMER" "$bus" --name r --format none --follow >/dev/null 2>&1 &
  holder=$!
  pids+=($holder)
  for ((i = 0; i < 300; i++)); do
    grep -q '"held":true' <("$INSPECT" show "$bus" --interval 0 --json 2>/dev/null) && break
    sleep 0.01
  done
  expect_failure held "reader name 'r' is held by a live reader \(pid $holder\)" \
    "$INSPECT" reset "$bus" --reader r --to earliest
  kill -INT "$holder"
  wait "$holder" || true
  "$INSPECT" reset "$bus" --reader r --to 3 >/dev/null || fail "refused once the holder left"
  [[ $("$CONSUMER" "$bus" --name r --count 1 2>/dev/null) == 3 ]] || fail "did not resume at 3"

  # Inside a message that spans records: says where the next one starts.
  head -c 150 /dev/zero | tr '\0' x | "$PRODUCER" "$bus" --keep-open 2>/dev/null  # seq 21..23
  echo after | "$PRODUCER" "$bus" --keep-open 2>/dev/null                           # seq 24
  expect_failure inside "sequence 22 is inside a message that spans records \(the next message starts at 24\)" \
    "$INSPECT" reset "$bus" --reader r --to 22

  # A bus whose records carry no timestamps: a time cannot be found, and it says why.
  new_bus plain
  seq 0 4 | "$PRODUCER" "$plain" --create --keep-open 2>/dev/null
  "$CONSUMER" "$plain" --name r --count 1 >/dev/null 2>&1
  expect_failure unstamped "none of the 5 retained records carries a timestamp .*--timestamps" \
    "$INSPECT" reset "$plain" --reader r --to now-1h
  ;;

man_pages)  # every page lists every subcommand with its options, and has EXIT STATUS
  : "${MAN_DIR:?set MAN_DIR to the built man pages}"
  render() {
    if command -v man >/dev/null; then
      MANWIDTH=200 MAN_KEEP_FORMATTING=0 man -l -P cat "$1" 2>/dev/null | sed 's/.\x08//g'
    elif command -v groff >/dev/null; then
      groff -man -Tutf8 -rLL=200n "$1" 2>/dev/null | sed 's/.\x08//g'
    else
      echo "neither man nor groff: skipped" >&2
      exit 77
    fi
  }
  for program in $PROGRAMS; do
    name=$(basename "$program")
    page="$MAN_DIR/$name.1"
    [[ -f $page ]] || fail "$page missing"
    render "$page" >"$work/$name.txt"
    grep -q '^EXIT STATUS' "$work/$name.txt" || fail "$name.1 has no EXIT STATUS section"
    # Each status the program's --help lists, in the section.
    sed -n '/^EXIT STATUS/,/^[A-Z]/p' "$work/$name.txt" >"$work/$name.exit.txt"
    while read -r status _; do
      grep -q "^ *$status " "$work/$name.exit.txt" || fail "$name.1: EXIT STATUS lacks $status"
    done < <("$program" --help | awk '/^Exit status:$/ { on = 1; next } on && /^  [^ ]/ { print; next } on { on = 0 }')
    for option in $(long_options "$program"); do
      grep -q -- "$option" "$work/$name.txt" || fail "$name.1 lacks $option"
    done
    for sub in $(subcommands "$program"); do
      grep -qE "^ +$name $sub\$" "$work/$name.txt" || fail "$name.1 has no section for '$name $sub'"
      # Its options, within its own section.
      sed -n "/^ \\+$name $sub\$/,/^ \\+$name [a-z]\\+\$\\|^[A-Z]/p" "$work/$name.txt" >"$work/$name.$sub.txt"
      for option in $(long_options "$program" "$sub"); do
        grep -q -- "$option" "$work/$name.$sub.txt" || fail "$name.1: '$name $sub' lacks $option"
      done
    done
    note "$name.1: $(subcommands "$program" | wc -l) subcommands, EXIT STATUS"
  done
  ;;

completion_bash)  # the bash completion offers subcommands, options, values and bus names
  : "${COMPLETION_BASH:?set COMPLETION_BASH to the generated bash completion}"
  new_bus bus
  echo a | "$PRODUCER" "$bus" --create --keep-open 2>/dev/null
  mkdir "$work/dir"
  : >"$work/dir/shmbus.elsewhere"
  # complete WORD...: what the completion offers for the last WORD.
  complete_words() {
    bash --norc --noprofile -c '
      source "$1"; shift
      COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
      _shmbus; printf "%s\n" "${COMPREPLY[@]}"' _ "$COMPLETION_BASH" "$@"
  }
  offers() {  # offers WANT WORD...: WANT is among what WORD... completes to
    local want=$1
    shift
    complete_words "$@" >"$work/offered"
    grep -qxF -- "$want" "$work/offered" || fail "'$*' does not offer '$want': $(tr '\n' ' ' <"$work/offered")"
  }
  offers reset shmbus-inspect re
  offers rm shmbus-inspect r
  offers --reader shmbus-inspect reset --re
  offers --interval shmbus-inspect show --int
  offers --trust-owner shmbus-inspect show --trust
  offers overwrite shmbus-producer x --policy o
  offers busy-spin shmbus-consumer x --wait bu
  offers json shmbus-consumer x --format = j   # bash splits --format=j at the =
  offers --format=json shmbus-consumer x --format=j  # unless COMP_WORDBREAKS lacks it
  offers "$bus" shmbus-inspect show "${bus%-*}"
  offers "$bus" shmbus-consumer "${bus%-*}"
  offers "$bus" shmbus-inspect reset "${bus%-*}"
  offers "$bus" shmbus-producer --binary "${bus%-*}"  # a flag with "Excludes:" in its help takes no value
  offers earliest shmbus-inspect reset "$bus" --to e
  SHMBUS_DIR="$work/dir" complete_words shmbus-inspect show e >"$work/dir_offered"
  grep -qxF elsewhere "$work/dir_offered" || fail "SHMBUS_DIR: offered $(cat "$work/dir_offered")"
  grep -qxF "$bus" "$work/dir_offered" && fail "SHMBUS_DIR: offered a bus of /dev/shm"
  complete_words shmbus-inspect --dir "$work/dir" show e >"$work/dir_opt"
  grep -qxF elsewhere "$work/dir_opt" || fail "--dir: offered $(cat "$work/dir_opt")"
  # The names a bus remembers, for reset --reader and gc --forget (the
  # completion asks shmbus-inspect, found on PATH as the user typed it).
  "$CONSUMER" "$bus" --name keeper --count 1 >/dev/null 2>&1
  PATH="$(dirname "$INSPECT"):$PATH" complete_words shmbus-inspect reset "$bus" --reader k >"$work/readers"
  grep -qxF keeper "$work/readers" || fail "reset --reader offered: $(cat "$work/readers")"
  PATH="$(dirname "$INSPECT"):$PATH" complete_words shmbus-inspect gc "$bus" --forget "" >"$work/readers"
  grep -qxF keeper "$work/readers" || fail "gc --forget offered: $(cat "$work/readers")"
  # After a subcommand, no subcommand again; an option's value is no subcommand.
  complete_words shmbus-inspect --trust-owner show s >"$work/after_value"
  grep -qxF show "$work/after_value" || fail "the value of --trust-owner was taken for a subcommand"
  # Every option of every program and subcommand is offered: one line
  # "WANT WORD..." each, checked in one shell.
  for program in $PROGRAMS; do
    name=$(basename "$program")
    for option in $(long_options "$program"); do echo "$option $name $option"; done
    for sub in $(subcommands "$program"); do
      echo "$sub $name $sub"
      for option in $(long_options "$program" "$sub"); do echo "$option $name $sub $option"; done
    done
  done >"$work/cases"
  bash --norc --noprofile -c '
    source "$1"
    while read -r want words; do
      COMP_WORDS=($words); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
      _shmbus
      printf "%s\n" "${COMPREPLY[@]}" | grep -qxF -- "$want" || echo "MISSING: $words -> $want"
    done <"$2"' _ "$COMPLETION_BASH" "$work/cases" >"$work/missing"
  [[ ! -s "$work/missing" ]] || fail "not offered: $(cat "$work/missing")"
  note "$(wc -l <"$work/cases") subcommands and options offered"
  ;;

completion_zsh)  # the zsh completion, called as zsh's completion system calls it
  : "${COMPLETION_ZSH:?set COMPLETION_ZSH to the generated zsh completion}"
  command -v zsh >/dev/null || { echo "zsh is not installed: skipped" >&2; exit 77; }
  new_bus bus
  echo a | "$PRODUCER" "$bus" --create --keep-open 2>/dev/null
  # complete WORD...: what _shmbus offers for the last WORD (compadd stubbed).
  complete_words() {
    zsh -f -c '
      compadd() { local a; for a in "$@"; do [[ $a == -a ]] && continue; [[ $a == -- ]] && continue; [[ $a == names ]] && print -rl -- $names && continue; print -r -- $a; done }
      compset() { : }
      _files() { print -r -- "(files)" }
      source "$1"; shift
      words=("$@"); CURRENT=$#
      _shmbus' _ "$COMPLETION_ZSH" "$@"
  }
  offers() {
    local want=$1
    shift
    complete_words "$@" >"$work/offered"
    grep -qxF -- "$want" "$work/offered" || fail "'$*' does not offer '$want': $(tr '\n' ' ' <"$work/offered")"
  }
  offers reset shmbus-inspect re
  offers --reader shmbus-inspect reset --
  offers overwrite shmbus-producer x --policy o
  offers "$bus" shmbus-inspect show x
  offers "(files)" shmbus-producer x --file ""
  "$CONSUMER" "$bus" --name keeper --count 1 >/dev/null 2>&1
  PATH="$(dirname "$INSPECT"):$PATH" offers keeper shmbus-inspect reset "$bus" --reader ""
  ;;

*)
  fail "unknown case"
  ;;
esac
