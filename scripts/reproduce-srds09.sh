#!/usr/bin/env bash
# Reproduce the SRDS 2009 experiment: 83 brokers, δ = 3, 2,600 subscriptions,
# 26 publishers, 1, 2 and 3 simultaneous failures at R1–R3.
set -euo pipefail

usage() {
	cat <<'USAGE'
Usage: scripts/reproduce-srds09.sh [--mode process|inproc|sim] [--out DIR] [--failures "1 2 3"]

Runs testbed/examples/srds09.toml once per number of simultaneous crashes
K (R1; R1 R2; R1 R2 R3, all at t=20s, restarted at t=30s) and writes each
run's results (summary.json, deliveries.csv, brokers.csv, delay/rate/cpu
plots) to DIR/failures-K (default DIR: results/srds09-MODE). Prints each
run's verdict, the delay before/during/after the crash and the memory of all
brokers together, and exits 1 if any run's verdict is FAIL.

The deltapub binary is $DELTAPUB if set, else built from this checkout.
Process mode starts 83 broker processes: expect about a minute per run on a
2-core machine.
USAGE
}

mode=process
out=""
failures="1 2 3"
while [[ $# -gt 0 ]]; do
	case "$1" in
	-h | --help) usage; exit 0 ;;
	--mode) mode="$2"; shift 2 ;;
	--out) out="$2"; shift 2 ;;
	--failures) failures="$2"; shift 2 ;;
	*) echo "reproduce-srds09: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${out:-results/srds09-$mode}"
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

bin="${DELTAPUB:-}"
if [[ -z "$bin" ]]; then
	bin="$tmp/deltapub"
	(cd "$root" && go build -o "$bin" ./cmd/deltapub)
fi

status=0
for k in $failures; do
	case "$k" in
	1) rs='"R1"' ;;
	2) rs='"R1", "R2"' ;;
	3) rs='"R1", "R2", "R3"' ;;
	*) echo "reproduce-srds09: failures must be 1, 2 or 3, got $k" >&2; exit 2 ;;
	esac
	file="$tmp/srds09-$k.toml"
	sed -e "s/^name = \"srds09\"/name = \"srds09-$k-failures\"/" \
		-e "s/^crash = \\[.*\\]/crash = [$rs]/" \
		-e "s/^restart = \\[.*\\]/restart = [$rs]/" \
		"$root/testbed/examples/srds09.toml" >"$file"
	echo "=== $k simultaneous failure(s): crash [$rs] at 20s, restart at 30s ($mode mode)"
	"$bin" testbed check "$file" >/dev/null
	set +e
	"$bin" testbed run "$file" --mode "$mode" --out "$out/failures-$k" --quiet >"$out/failures-$k.txt" 2>"$out/failures-$k.log"
	rc=$?
	set -e
	grep -E "^  (publications|deliveries|delay ms|at [0-9]|broker memory)|^verdict|FAIL:" "$out/failures-$k.txt" || cat "$out/failures-$k.log"
	[[ $rc -eq 0 ]] || status=1
done
echo "figures: $out/failures-*/delay.png, rate.png, cpu.png"
exit "$status"
