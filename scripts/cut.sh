#!/usr/bin/env bash
# Cut the link between two brokers: of a running testbed (any mode), or of any
# brokers through their admin endpoints.
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
	cat <<'USAGE'
Usage: scripts/cut.sh [--dir DIR | --control HOST:PORT] A B
       scripts/cut.sh --admin ADMIN_A,ADMIN_B [--token-file FILE] A B

Cut the link between two brokers. Both ends are told, so the link is
refused both ways until healed: each broker closes its link to the other,
refuses its dials and drops what still arrives from it, as in a network
partition; both stay up, see each other fail, and bypass each other.

With a testbed (deltapub testbed run, process, inproc or sim mode): found
through DIR/control.addr (DIR = its --out directory), --control,
TESTBED_CONTROL, or the newest results/*/control.addr; the fault is recorded
in the run and taken into account by the oracle.

With --admin: the two brokers' admin endpoints (broker option --admin;
A's first), POST /ctl/cut?peer=... on each (loopback callers only; see
docs/operations.md). --token-file: the brokers' client token file, when
they have one. Needs curl.

Prints "ok" per end, or "error: ..." and exits 1. See scripts/testbed-ctl.sh --help.
USAGE
	exit 0
fi
if [[ "${1:-}" == "--admin" ]]; then
	exec "$(dirname "$0")/broker-ctl.sh" cut "${@:2}"
fi
flags=()
while [[ $# -gt 0 && "$1" == --* ]]; do flags+=("$1" "$2"); shift 2; done
exec "$(dirname "$0")/testbed-ctl.sh" "${flags[@]}" cut "$@"
