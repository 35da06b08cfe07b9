#!/bin/sh
# Writes the shell completion of the programs from the programs themselves,
# so that it cannot disagree with them:
#
#   completions.sh OUTDIR PROGRAM...
#
# For every PROGRAM (a path to a built program) its --help and each of its
# subcommands' --help are read for subcommands, options, which options take
# a value and which values (CLI11's "TEXT:{a,b}" or "TEXT:a|b"), and
# whether the positional is a bus. The result is one spec function,
# _shmbus_spec, shared by the bash completion (OUTDIR/bash/shmbus, from
# completion/shmbus.bash.in, installed once per program name as
# bash-completion loads it) and the zsh completion (OUTDIR/zsh/_shmbus,
# from completion/_shmbus.zsh.in).
set -eu
out=$1
shift
here=$(cd "$(dirname "$0")/.." && pwd)

# One help text's options as "NAMES KIND" lines: NAMES the option's names
# joined by ",", KIND "flag", "bus", "reader" (a name the bus remembers),
# "file", "any" or "choice:a|b|c";
# positionals as "@pos KIND".
parse() {
  awk '
    /^[A-Za-z][A-Za-z ]*:$/ { section = $0; next }
    /^  [^ ]/ {
      if (length($0) > 30 && substr($0, 30, 1) == " " && substr($0, 31, 1) != " ") term = substr($0, 3, 28)
      else term = substr($0, 3)
      sub(/ +$/, "", term)
      split(term, part, " ")
      names = part[1]; type = part[2]
      if (section == "Positionals:") {
        kind = (tolower(names) == "bus") ? "bus" : "any"
        print "@pos " kind
        next
      }
      if (section != "Options:") next
      # A value in brackets is optional: complete what follows as if none.
      # A flag with a constraint prints "Excludes: ..." or "Needs: ..." where a value type would be.
      if (type == "" || type == "REQUIRED" || type == "..." || type ~ /^\[/ || type ~ /^(Excludes|Needs):$/) kind = "flag"
      else if (match(type, /:\{[^}]*\}/)) { kind = substr(type, RSTART + 2, RLENGTH - 3); gsub(/,/, "|", kind); kind = "choice:" kind }
      else if (match(type, /:[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)+/)) kind = "choice:" substr(type, RSTART + 1, RLENGTH - 1)
      else if (names ~ /(^|,)--to$/) kind = "choice:earliest|latest"  # reset: or a sequence, or a time
      else if (names ~ /(^|,)--bus$/) kind = "bus"
      else if (names ~ /(^|,)--(reader|forget)$/) kind = "reader"
      else if (names ~ /(file|tls-ca|tls-cert|tls-key|creds)$/) kind = "file"
      else kind = "any"
      print names " " kind
    }
  '
}

# The spec of one help text as the body of a case branch: subs, opts, vals, pos.
branch() {
  printf '%s\n' "$1" | parse | awk -v subs="$2" '
    $1 == "@pos" { pos = $2; next }
    {
      n = split($1, names, ",")
      for (i = 1; i <= n; ++i) {
        name = names[i]; if (name !~ /^-/) name = "-" name
        opts = opts (opts == "" ? "" : " ") name
        if ($2 != "flag") vals = vals (vals == "" ? "" : " ") name "=" $2
      }
    }
    END {
      printf "      subs=\"%s\"\n      opts=\"%s\"\n      vals=\"%s\"\n      pos=\"%s\"\n      ;;\n", subs, opts, vals, pos
    }
  '
}

spec="_shmbus_spec() {
  # \$1 program, \$2 subcommand (empty: the program itself). Sets subs (its
  # subcommands), opts (its options), vals (\"OPTION=KIND\" for those that
  # take a value: bus, reader, file, any, choice:A|B) and pos (bus: its
  # positional is a bus).
  subs= opts= vals= pos=
  case \"\$1 \$2\" in"
for program in "$@"; do
  name=$(basename "$program")
  help=$("$program" --help)
  subs=$(printf '%s\n' "$help" | awk '/^Subcommands:$/ { on = 1; next } on && /^  [^ ]/ { print $1; next } on { on = 0 }' | tr '\n' ' ' | sed 's/ $//')
  spec="$spec
    \"$name \")
$(branch "$help" "$subs")"
  for sub in $subs; do
    spec="$spec
    \"$name $sub\")
$(branch "$("$program" "$sub" --help)" "")"
  done
done
spec="$spec
  esac
}"

mkdir -p "$out/bash" "$out/zsh"
programs=""
for program in "$@"; do programs="$programs $(basename "$program")"; done
programs=${programs# }
for shell in bash zsh; do
  if [ $shell = bash ]; then template=$here/completion/shmbus.bash.in target=$out/bash/shmbus
  else template=$here/completion/_shmbus.zsh.in target=$out/zsh/_shmbus; fi
  {
    awk -v programs="$programs" '/^@SPEC@$/ { exit } { gsub(/@PROGRAMS@/, programs); print }' "$template"
    printf '%s\n' "$spec"
    awk -v programs="$programs" 'seen { gsub(/@PROGRAMS@/, programs); print } /^@SPEC@$/ { seen = 1 }' "$template"
  } >"$target.tmp"
  mv "$target.tmp" "$target"
done
