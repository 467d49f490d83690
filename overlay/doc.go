// Package overlay is the protocol core of one deltapub broker: a pure,
// deterministic state machine with no I/O, no clock and no goroutine of its
// own. The runtime (overlay/runtime) drives one Node per broker process from
// QUIC or from its in-memory transport; the simulator (internal/sim) drives
// many at once on virtual time. Both run exactly this code, so a decision
// that shapes traffic (when to retry a join, ask for state, dial, give up)
// lives here, counted in ticks.
//
// # Inputs and outputs
//
// Inputs are method calls: Bootstrap or Join to start, Step for a message
// from a peer, Tick for time, LinkUp, LinkDown and DialFailed for the
// transport's news, ClientOpen, Client and ClientClose for local client
// sessions, Leave to leave gracefully. Outputs accumulate until Ready
// returns them: messages to peers, deliveries and acknowledgements to
// clients, dials and link closes to make, notices for operators. The caller
// carries them out and hands the buffers back with Recycle.
//
// # The protocol in a page
//
// Brokers form a tree. A new broker joins as a child of the first
// joinpoint that admits it (member.go, retry.go); every broker keeps a map
// of its (δ+1)-neighbourhood (topology), updated by topology floods that
// travel δ+1 hops.
//
// A subscription is flooded from its edge broker over the tree; each broker
// records it with a from-pointer, the direction it came from, and the
// flood reaches δ+1 hops past each broker so that the brokers beyond up to
// δ failed ones know it too (flood.go, routing). Confirmations travel back
// to the edge, which then acknowledges the subscriber.
//
// A publication is matched at each broker (matching) and forwarded toward
// the directions of the matching subscriptions, to the next hop of each:
// the tree neighbour, or, when that neighbour is unusable (suspected,
// recovering, gone), the closest live broker on the tree path within δ+1
// hops, a bypass (forward.go, routes.go). Each hop stamps it; every broker
// keeps what it forwarded until depth acknowledgements (DACKs, package
// dack; dackpurge.go) from δ+1 hops downstream say it is safe everywhere
// it had to go, and retransmits in stamp order on a route switch, so that
// each subscriber gets every matching publication once, in per-publisher
// order, as long as no more than δ adjacent brokers are down.
//
// Failures are detected by heartbeat silence (peers.go): a silent peer is
// suspected, its link closed and probed again; a peer suspected for
// gone_after is removed from the tree and its children reattach. A broker
// that restarts (a larger epoch) rejoins at its old place and recovers the
// routing state of its neighbourhood before it says it is routable
// (recovery.go). A leave drains the leaver's queue first and repairs the tree
// around it (leave.go). Beyond δ, the protocol detects the hole and tells
// subscribers with Gap notices instead of losing silently.
//
// docs/protocol.md states each rule with its argument and names the
// scenario files under internal/sim/testdata that exercise it; PROTOCOL.md
// in the design folder is the paper's model.
package overlay
