package testbed

import "github.com/deltapub/deltapub/internal/sim"

// simFactory is the protocol core the sim mode runs: the simulator's
// default, the real overlay.Node.
var simFactory sim.NodeFactory = func(nc sim.NodeConfig) (sim.Node, error) { return sim.DefaultFactory(nc) }
