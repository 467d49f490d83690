#!/usr/bin/env bash
# sim-identity.sh BINARY OUTDIR — write the simulator's deterministic outputs for BINARY (a built
# deltapub) to OUTDIR: the --trace replays of 14 fuzz seeds (DAck entries sorted: their order
# carries no meaning) and `sim srds09 --crashes 0,1,3` output and timelines without the speed
# lines. A pure speed change must leave them byte-identical:
#   go build -o /tmp/a/deltapub ./cmd/deltapub   # before the change
#   go build -o /tmp/b/deltapub ./cmd/deltapub   # after
#   scripts/sim-identity.sh /tmp/a/deltapub /tmp/a/out && scripts/sim-identity.sh /tmp/b/deltapub /tmp/b/out
#   diff -rq /tmp/a/out /tmp/b/out               # nothing printed: behaviour unchanged
set -euo pipefail
bin=${1:-}; out=${2:-}
if [[ -z "$bin" || -z "$out" || ! -x "$bin" ]]; then
  echo "usage: sim-identity.sh BINARY OUTDIR (BINARY: a built deltapub)" >&2
  exit 2
fi
mkdir -p "$out"
norm() { # sort the entries inside each "DAck &{Entries:[...]}"
  python3 -c '
import re, sys
for line in sys.stdin:
    m = re.search(r"DAck &\{Entries:\[(.*)\]\}", line)
    if m:
        items = re.findall(r"\{[^}]*\}", m.group(1))
        line = line[:m.start(1)] + " ".join(sorted(items)) + line[m.end(1):]
    sys.stdout.write(line)'
}
for s in 3 17 35 123 2560 7322 13 178 1132 21788 30981; do
  "$bin" sim replay --seed "$s" --trace 2>&1 | norm > "$out/replay-$s.txt"
done
for s in 50515 63444 70645; do
  "$bin" sim replay --seed "$s" --brokers 10-40 --delta 2-3 --faults 1 --trace 2>&1 | norm > "$out/replay-leave-$s.txt"
done
"$bin" sim srds09 --crashes 0,1,3 --timeline "$out/tl.csv" 2>&1 | sed -E 's/ speed=.*//' | grep -v 'wall=\|cpu=' > "$out/srds.txt"
echo "sim-identity: outputs of $bin in $out"
