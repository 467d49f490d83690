#!/usr/bin/env bash
# Make brokers of a running testbed leave gracefully (they exit for good).
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
	cat <<'USAGE'
Usage: scripts/leave.sh [--dir DIR | --control HOST:PORT] BROKER...

Make brokers of a running testbed leave the overlay gracefully (SIGTERM in
process mode): each hands its place in the tree over, drains and exits; it
cannot be restarted (a new broker needs a new name).
The testbed is found through DIR/control.addr (DIR = the --out directory of
'deltapub testbed run'), --control, TESTBED_CONTROL, or the newest
results/*/control.addr. Prints "ok" per broker, or "error: ..." and exits 1.
See scripts/testbed-ctl.sh --help.
USAGE
	exit 0
fi
flags=()
while [[ $# -gt 0 && "$1" == --* ]]; do flags+=("$1" "$2"); shift 2; done
exec "$(dirname "$0")/testbed-ctl.sh" "${flags[@]}" leave "$@"
