// Package runtime runs a broker: it drives the pure protocol core
// (overlay.Node) with real inputs and carries out its outputs.
//
// What it owns:
//
//   - One goroutine owns a Node (Runtime.Run): it feeds it the transport's
//     inputs (links up and down, peer messages, client requests, in batches)
//     and a tick every BrokerConfig.Tick, and after every batch carries out
//     what the core asked for (messages, dials, closes, deliveries). Other
//     goroutines reach the core only through Runtime.Do. Every bound (input
//     queue, send queues, clients, subscriptions) and what happens at it is
//     in the doc of Runtime.
//   - The broker's configuration (BrokerConfig: TOML, presets, validation,
//     limits), turned into the core's overlay.Config with durations in ticks.
//   - Transports (Transport, Handler, PeerLink, ClientSession): QUIC through
//     internal/quic (ListenQUIC), and its in-memory twin MemNetwork, for tests
//     and the testbed's inproc mode.
//   - Metrics: Prometheus, in a registry per runtime (metrics.go).
//   - Link cuts for failure injection (Runtime.Cut, Heal; cut.go), applied
//     by the runtime itself whatever the transport.
//   - The graceful leave: when Run's context ends (SIGTERM in cmd/deltapub),
//     the core leaves the overlay and Run returns once the neighbourhood
//     confirmed it, or after a bound (Runtime.HasLeft tells which).
//     Runtime.Kill stops it without one: a crash inside the process.
//   - Broker: a runtime, its QUIC transport and the admin endpoint, what
//     `deltapub broker` runs.
//
// The simulator (internal/sim) drives the same core without this package:
// every decision that shapes traffic is the core's, counted in ticks; what
// stays here (sockets, dial timeouts, the joinpoint's resolution, catching up
// on ticks after a stall) the simulator models as inputs.
//
// Locks. The runtime goroutine's state needs none. The locks that exist are
// leaves, never held while another is taken, except in MemNetwork:
//
//   - linkCuts.mu (the cut links, taken by transport goroutines); a link is
//     closed only after it is released;
//   - runtimeMetrics.mu (the Status snapshot read at scrape time);
//   - MemNetwork.mu (its registry), then memPipe.mu (one queue): in that
//     order. No Handler is called with either held.
package runtime
