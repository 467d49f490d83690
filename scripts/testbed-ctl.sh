#!/usr/bin/env bash
# Send one fault command to a running testbed through its control socket.
# Used by crash.sh, restart.sh, freeze.sh, resume.sh, leave.sh, cut.sh and heal.sh.
set -euo pipefail

usage() {
	cat <<'USAGE'
Usage: testbed-ctl.sh [--dir DIR | --control HOST:PORT] COMMAND ARGS...

Commands (broker names as in the experiment file, e.g. B2 or R1):
  crash BROKER...        kill brokers (their state is lost)
  restart BROKER...      start crashed brokers again (new epoch)
  freeze BROKER...       stop brokers from processing (SIGSTOP in process mode)
  resume BROKER...       resume frozen brokers
  leave BROKER...        graceful leave (SIGTERM in process mode): the broker
                         hands its place in the tree over and exits; it is gone
                         for good (no restart)
  cut A B                cut the link between A and B (both ends refuse it)
  heal A B               heal it
  brokers                list the brokers of the running testbed

The testbed (deltapub testbed run) writes its control address to
DIR/control.addr, DIR being its --out directory. Without --dir or
--control, TESTBED_CONTROL is used, else the newest results/*/control.addr
under the current directory. Faults sent here are recorded in the run
(summary.json notes) and taken into account by the delivery oracle.
USAGE
}

addr="${TESTBED_CONTROL:-}"
dir=""
while [[ $# -gt 0 ]]; do
	case "$1" in
	-h | --help) usage; exit 0 ;;
	--dir) dir="$2"; shift 2 ;;
	--control) addr="$2"; shift 2 ;;
	--) shift; break ;;
	-*) echo "testbed-ctl: unknown flag $1" >&2; usage >&2; exit 2 ;;
	*) break ;;
	esac
done
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
if [[ -n "$dir" ]]; then
	addr="$(cat "$dir/control.addr")"
elif [[ -z "$addr" ]]; then
	newest="$(ls -t results/*/control.addr 2>/dev/null | head -n 1 || true)"
	[[ -n "$newest" ]] || { echo "testbed-ctl: no running testbed found (give --dir DIR or --control HOST:PORT)" >&2; exit 2; }
	addr="$(cat "$newest")"
fi
host="${addr%:*}"
port="${addr##*:}"

cmd="$1"; shift
case "$cmd" in
crash | restart | freeze | resume | leave)
	[[ $# -ge 1 ]] || { echo "testbed-ctl: $cmd needs at least one broker" >&2; exit 2; }
	lines=()
	for b in "$@"; do lines+=("$cmd $b"); done ;;
cut | heal)
	[[ $# -eq 2 ]] || { echo "testbed-ctl: $cmd needs two brokers" >&2; exit 2; }
	lines=("$cmd $1 $2") ;;
brokers) lines=("brokers") ;;
*) echo "testbed-ctl: unknown command $cmd" >&2; usage >&2; exit 2 ;;
esac

# One connection carries every line: the brokers of one command are hit
# together (within milliseconds), as simultaneous failures should be.
exec 3<>"/dev/tcp/$host/$port" || { echo "testbed-ctl: cannot reach the testbed at $addr (has the run ended?)" >&2; exit 1; }
printf '%s\n' "${lines[@]}" >&3
status=0
for _ in "${lines[@]}"; do
	IFS= read -r -t 30 reply <&3 || { echo "testbed-ctl: no answer from $addr" >&2; exit 1; }
	echo "$reply"
	[[ "$reply" == error:* ]] && status=1
done
exec 3>&-
exit "$status"
