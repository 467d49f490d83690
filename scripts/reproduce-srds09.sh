#!/usr/bin/env bash
# Reproduce the SRDS 2009 experiment: 83 brokers, δ = 3, 2,600 subscriptions,
# 26 publishers, 1, 2 and 3 simultaneous failures at R1–R3.
set -euo pipefail

usage() {
	cat <<'USAGE'
Usage: scripts/reproduce-srds09.sh [--mode process|inproc|sim] [--out DIR] [--failures "1 2 3 r3"]

Runs testbed/examples/srds09.toml once per number of simultaneous crashes
K (R1; R1 R2; R1 R2 R3, all at t=20s, restarted at t=30s) and writes each
run's results (summary.json, deliveries.csv, brokers.csv, delay/rate/cpu
plots) to DIR/failures-K (default DIR: results/srds09-MODE). K = r3 crashes
R3 alone (the slides' load-change figure: R1's and R2's rates and CPU while
R3 is down). Prints each
run's verdict, the delay before/during/after the crash and the memory of all
brokers together, and exits 1 if any run's verdict is FAIL.

The deltapub binary is $DELTAPUB if set, else built from this checkout.
Process mode starts 83 broker processes (GOMAXPROCS=1 each); on 2 cores the
idle overlay alone takes about half the machine, so run it on a quiet
machine (the script warns when the load average is above 2): a busy machine
starves brokers past the failure timeout and the run fails with false
suspicions. Expect about 1.5 to 2 minutes per run in process mode on a
quiet 2-core machine (see docs/testbed.md); sim mode takes about 20 s.
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

load="$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)"
echo "load average at start: $load (nproc $(nproc 2>/dev/null || echo ?))"
if [[ "$mode" != sim ]] && awk -v l="$load" 'BEGIN{exit !(l > 2)}'; then
	echo "reproduce-srds09: warning: the machine is busy (load $load); 83 broker processes need it quiet" >&2
fi

status=0
for k in $failures; do
	t0=$SECONDS
	case "$k" in
	1) rs='"R1"' ;;
	2) rs='"R1", "R2"' ;;
	3) rs='"R1", "R2", "R3"' ;;
	r3) rs='"R3"' ;; # the slides' load-change figure: R3 fails, R1 and R2 carry on
	*) echo "reproduce-srds09: failures must be 1, 2, 3 or r3, got $k" >&2; exit 2 ;;
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
	echo "  wall time $((SECONDS - t0)) s, load average now $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo ?)"
	[[ $rc -eq 0 ]] || status=1
done
echo "figures: $out/failures-*/delay.png, rate.png, cpu.png"
exit "$status"
