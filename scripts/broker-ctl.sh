#!/usr/bin/env bash
# Cut or heal the link between two brokers through their admin endpoints
# (POST /ctl/cut and /ctl/heal), without a testbed. Used by cut.sh and
# heal.sh --admin.
set -euo pipefail
usage() {
	cat <<'USAGE'
Usage: broker-ctl.sh cut|heal ADMIN_A,ADMIN_B [--token-file FILE] A B

ADMIN_A and ADMIN_B are the admin addresses (HOST:PORT) of brokers A and B.
A is told to cut (heal) its link to B, and B its link to A. The admin
endpoints answer control requests from loopback addresses only.
USAGE
}
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -ge 4 ]] || { usage >&2; exit 2; }
op="$1"; admins="$2"; shift 2
case "$op" in cut | heal) ;; *) echo "broker-ctl: unknown command $op" >&2; exit 2 ;; esac
auth=()
if [[ "${1:-}" == "--token-file" ]]; then
	auth=(-H "Authorization: Bearer $(tr -d '\n' <"$2")")
	shift 2
fi
[[ $# -eq 2 ]] || { usage >&2; exit 2; }
IFS=, read -r admin_a admin_b <<<"$admins"
[[ -n "$admin_a" && -n "$admin_b" ]] || { echo "broker-ctl: --admin wants ADMIN_A,ADMIN_B" >&2; exit 2; }
command -v curl >/dev/null || { echo "broker-ctl: needs curl" >&2; exit 2; }
status=0
for pair in "$admin_a $2" "$admin_b $1"; do
	read -r addr peer <<<"$pair"
	reply="$(curl -sS --max-time 10 -X POST -H "X-Deltapub-Control: script" "${auth[@]}" \
		-w '\n%{http_code}' "http://$addr/ctl/$op?peer=$peer" 2>&1)" || true
	code="${reply##*$'\n'}"
	body="${reply%$'\n'*}"
	body="${body%$'\n'}"
	if [[ "$code" == 200 ]]; then
		echo "ok"
	else
		echo "error: $op $peer at $addr: $body"
		status=1
	fi
done
exit "$status"
