#!/usr/bin/env bash
# Reproduce the SRDS 2009 experiment: 83 brokers, δ = 3, 2,600 subscriptions,
# 26 publishers, 1, 2 and 3 simultaneous failures at R1–R3.
set -euo pipefail

usage() {
	cat <<'USAGE'
Usage: scripts/reproduce-srds09.sh [--mode process|inproc|sim|netns] [--out DIR] [--failures "1 2 3 r3"]
                                   [--hosts N] [--link-delay D]
       scripts/reproduce-srds09.sh --compare-replicas [--mode sim|inproc|process] [--out DIR]

Runs testbed/examples/srds09.toml once per number of simultaneous crashes
K (R1; R1 R2; R1 R2 R3, all at t=20s, restarted at t=30s) and writes each
run's results (summary.json, deliveries.csv, brokers.csv, the delay plot,
and R1's, R2's and R3's input rate, output rate and CPU plotted as on the
slides' load-change figure) to DIR/failures-K (default DIR:
results/srds09-MODE). K = r3 crashes R3 alone (the slide's own case: R1's
and R2's rates and CPU while R3 is down). Prints each run's verdict, the
delay before/during/after the crash and the memory of all brokers
together, and exits 1 if any run's verdict is FAIL.

The deltapub binary is $DELTAPUB if set, else built from this checkout.
Process mode starts 83 broker processes (GOMAXPROCS=1 each); on 2 cores the
idle overlay alone takes about half the machine, so run it on a quiet
machine (the script warns when the load average is above 2): a busy machine
starves brokers past the failure timeout and the run fails with false
suspicions. Expect about 1.5 to 2 minutes per run in process mode on a
quiet 2-core machine (see docs/testbed.md); sim mode takes about 20 s.

With --compare-replicas it runs the slides' comparison instead (slide 24,
docs/results/srds09-replicas.md): the same tree and workload once with
δ = 2 and once with the replica-based baseline, 2 replicas per virtual node
(docs/baseline.md); R2 and R3 crash at t=20s (with replicas: R2a and R3a,
one replica of each virtual node) and stay down. It writes both runs to
DIR/delta and DIR/replicas (default DIR: results/srds09-replicas-MODE), sets
the load at R1 (with replicas: the replica R1a) before (10–20 s) and after
(22–40 s) side by side, plots it (DIR/r1-load.png), and ends with the line
`ratio R1 cpu (delta/replicas): X.XX` (in sim mode, which measures no CPU,
and in inproc mode, whose brokers share one process, the ratio of messages
processed at R1). In process mode the replicas run as `deltapub broker
--overlay-mode replicas` processes (166 of them: give it a quiet machine).

netns mode (root) places the brokers round-robin on --hosts N emulated
hosts (default 21, the slides' cluster) with --link-delay D one way between
any two (default 0.1ms, their gigabit Ethernet; 20ms is a WAN).
USAGE
}

mode=process
out=""
failures="1 2 3"
compare=no
hosts=21
link_delay=0.1ms
while [[ $# -gt 0 ]]; do
	case "$1" in
	-h | --help) usage; exit 0 ;;
	--compare-replicas) compare=yes; shift ;;
	--mode) mode="$2"; shift 2 ;;
	--out) out="$2"; shift 2 ;;
	--failures) failures="$2"; shift 2 ;;
	--hosts) hosts="$2"; shift 2 ;;
	--link-delay) link_delay="$2"; shift 2 ;;
	*) echo "reproduce-srds09: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
if [[ $compare == yes ]]; then
	out="${out:-results/srds09-replicas-$mode}"
else
	out="${out:-results/srds09-$mode}"
fi
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

# run_one FILE DIR EXTRA: checks and runs FILE into DIR (DIR.txt, DIR.log),
# prints its verdict lines (and those matching EXTRA); fails with the run.
run_one() {
	local t0=$SECONDS rc
	"$bin" testbed check "$1" >/dev/null
	set +e
	"$bin" testbed run "$1" --mode "$mode" --out "$2" --quiet >"$2.txt" 2>"$2.log"
	rc=$?
	set -e
	grep -E "^  (publications|deliveries|$3)|^verdict|FAIL:" "$2.txt" || cat "$2.log"
	echo "  wall time $((SECONDS - t0)) s, load average now $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo ?)"
	return "$rc"
}

if [[ $compare == yes ]]; then
	# Everything before the first [[faults]] of the experiment, then the
	# comparison's one fault: R2 and R3 (their first replicas) crash at 20 s.
	head_of() { awk '/^\[\[faults\]\]/{exit} {print}' "$root/testbed/examples/srds09.toml"; }
	head_of | sed -e 's/^name = "srds09"/name = "srds09-delta2"/' -e 's/^delta = 3/delta = 2/' >"$tmp/delta.toml"
	printf '[[faults]]\nat = "20s"\ncrash = ["R2", "R3"]\n' >>"$tmp/delta.toml"
	head_of | sed -e 's/^name = "srds09"/name = "srds09-replicas2"/' -e 's/^delta = 3/mode = "replicas"\nreplicas = 2/' >"$tmp/replicas.toml"
	printf '[[faults]]\nat = "20s"\ncrash = ["R2a", "R3a"]\n' >>"$tmp/replicas.toml"
	status=0
	for run in delta replicas; do
		echo "=== $run: $(grep -E '^(delta|mode|replicas) =' "$tmp/$run.toml" | tr '\n' ' ')crash at 20s ($mode mode)"
		run_one "$tmp/$run.toml" "$out/$run" "control" || status=1
	done
	[[ $status -eq 0 ]] || { echo "reproduce-srds09: a run failed; no comparison" >&2; exit 1; }
	"$bin" testbed compare --load R1,R1a --labels delta,replicas --before 10s:20s --after 22s:40s \
		--plot "$out/r1-load.png" "$out/delta" "$out/replicas" | tee "$out/compare.txt"
	exit 0
fi

status=0
for k in $failures; do
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
	if [[ "$mode" == netns ]]; then
		for ((h = 1; h <= hosts; h++)); do printf '\n[[hosts]]\nname = "h%d"\n' "$h"; done >>"$file"
		printf '\n[network]\ndelay = "%s"\n' "$link_delay" >>"$file"
	fi
	echo "=== $k simultaneous failure(s): crash [$rs] at 20s, restart at 30s ($mode mode)"
	run_one "$file" "$out/failures-$k" "delay ms|at [0-9]|broker memory" || status=1
	if [[ -f "$out/failures-$k/summary.json" ]]; then
		# The rate and CPU plots show R1, R2 and R3 themselves, as the
		# slides' load-change figure (slide 23) does.
		"$bin" testbed report --brokers R1,R2,R3 "$out/failures-$k" >/dev/null || status=1
	fi
done
echo "figures: $out/failures-*/delay.png, rate-in.png, rate.png, cpu.png"
exit "$status"
