#!/bin/sh
# Writes what help2man cannot take from a program's top-level --help alone,
# from the program itself, so that a man page never disagrees with it:
#
#   man_include.sh PROGRAM NAME INCLUDE WRAPPER
#
# INCLUDE   a help2man --include file: a SUBCOMMANDS section with every
#           subcommand's own --help (its usage, positionals and options), and
#           an EXIT STATUS section made from the "Exit status:" block that
#           ends the program's --help (tools/common/program.hpp,
#           exit_status_help()).
# WRAPPER   a script help2man runs in place of PROGRAM: the same --help and
#           --version without that block, which the EXIT STATUS section holds.
set -eu
program=$1 name=$2 include=$3 wrapper=$4

# roff-safe text: backslashes escaped, a leading . or ' defused, - as \-.
roff() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/" -e 's/-/\\-/g'; }

# CLI11 help text as roff: a heading ("Options:") in bold, each entry a .TP
# with its name in bold and its text below. CLI11 puts an entry's text at
# column 31 (the name padded to 30), or on the lines below, indented 30, when
# the name is longer.
entries() {
  awk '
    function esc(s) { gsub(/\\/, "\\e", s); gsub(/-/, "\\-", s); sub(/^[.'"'"']/, "\\\\\\&&", s); return s }
    /^[A-Za-z][A-Za-z ]*:$/ { printf ".PP\n\\fB%s\\fR\n", $0; next }
    /^  [^ ]/ {
      if (length($0) > 30 && substr($0, 30, 1) == " " && substr($0, 31, 1) != " ") {
        term = substr($0, 3, 28); text = substr($0, 31)
      } else {
        term = substr($0, 3); text = ""
      }
      sub(/ +$/, "", term)
      printf ".TP\n\\fB%s\\fR\n", esc(term)
      if (text != "") print esc(text)
      next
    }
    /^      +[^ ]/ { sub(/^ +/, ""); print esc($0); next }
    /^$/ { next }
    { printf ".PP\n%s\n", esc($0) }
  '
}

help=$("$program" --help)
exit_block=$(printf '%s\n' "$help" | awk '/^Exit status:$/ { on = 1; next } on && /^  [^ ]/ { print; next } on { on = 0 }')
if [ -z "$exit_block" ]; then
  echo "man_include.sh: $program --help ends with no 'Exit status:' block" >&2
  exit 1
fi
subcommands=$(printf '%s\n' "$help" | awk '/^Subcommands:$/ { on = 1; next } on && /^  [^ ]/ { print $1; next } on { on = 0 }')

{
  if [ -n "$subcommands" ]; then
    echo "[SUBCOMMANDS]"
    printf '%s\n' "Each subcommand takes its own options after its name (\\fB$name SUBCOMMAND \\-\\-help\\fR):"
    for sub in $subcommands; do
      sub_help=$("$program" "$sub" --help | awk '/^Exit status:$/ { skip = 1; next } skip && /^  / { next } { skip = 0; print }')
      printf '.SS "%s %s"\n' "$name" "$sub"
      # The text before "Usage:" says what the subcommand does.
      printf '%s\n' "$sub_help" | awk '/^Usage:/ { exit } { print }' | roff
      printf '%s\n' "$sub_help" | awk '/^Usage:/ { sub(/^Usage: [^ ]*/, ""); print; exit }' |
        { read -r usage; printf '.PP\n\\fB%s\\fR %s\n' "$name" "$(printf '%s\n' "$usage" | roff)"; }
      printf '%s\n' "$sub_help" | awk 'seen { print } /^Usage:/ { seen = 1 }' | entries
    done
  fi
  echo "[EXIT STATUS]"
  # "  STATUS  meaning": the status in bold, its meaning below.
  printf '%s\n' "$exit_block" | roff | awk '{ status = $1; sub(/^ *[^ ]+ +/, ""); printf ".TP\n\\fB%s\\fR\n%s\n", status, $0 }'
} >"$include"

cat >"$wrapper" <<WRAP
#!/bin/sh
# help2man runs this in place of $name (cmake/man_include.sh): its output
# without the Exit status block, which the man page's EXIT STATUS holds.
"$program" "\$@" | awk '/^Exit status:\$/ { skip = 1; next } skip && /^  / { next } { skip = 0; print }'
WRAP
chmod +x "$wrapper"
