#!/usr/bin/env bash
# Heal a cut link between two brokers of a running testbed.
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
	cat <<'USAGE'
Usage: scripts/heal.sh [--dir DIR | --control HOST:PORT] A B

Heal a cut link between two brokers of a running testbed.
The testbed is found through DIR/control.addr (DIR = the --out directory of
'deltapub testbed run'), --control, TESTBED_CONTROL, or the newest
results/*/control.addr. Prints "ok" per broker, or "error: ..." and exits 1.
See scripts/testbed-ctl.sh --help.
USAGE
	exit 0
fi
flags=()
while [[ $# -gt 0 && "$1" == --* ]]; do flags+=("$1" "$2"); shift 2; done
exec "$(dirname "$0")/testbed-ctl.sh" "${flags[@]}" heal "$@"
