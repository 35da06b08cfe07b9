#!/usr/bin/env bash
# Checks that the checked-in fuzz corpus is what this build's make-seeds
# writes: segment seeds of the current layout (magic and layout version, the
# first 12 bytes; the rest holds times and pids) and record seeds byte for
# byte. A layout change that left them behind would have libFuzzer start
# from segments the library refuses at the version check, fuzzing little
# else.
#   corpus_current.sh MAKE_SEEDS CORPUS_DIR
set -euo pipefail
make_seeds=$1 corpus=$2
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
"$make_seeds" "$fresh"
stale=0
for f in "$fresh"/segment/*; do
  cmp -s -n 12 "$f" "$corpus/segment/${f##*/}" || { echo "stale: segment/${f##*/} (magic or layout version)" >&2; stale=1; }
done
for f in "$fresh"/record/*; do
  cmp -s "$f" "$corpus/record/${f##*/}" || { echo "stale: record/${f##*/}" >&2; stale=1; }
done
if ((stale)); then
  echo "the fuzz corpus is not this layout's; remake it: $make_seeds $corpus" >&2
  exit 1
fi
echo "fuzz corpus: $(ls "$fresh"/segment | wc -l) segment and $(ls "$fresh"/record | wc -l) record seeds are this layout's" >&2
