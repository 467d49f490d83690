package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/topology"
)

// Tree is a planned overlay tree: the brokers in join order (Order[0] is
// the root) and each one's parent. The overlay the core actually builds can
// differ (a join can go to another joinpoint when its parent is down); the
// plan is what faults are placed on.
type Tree struct {
	Order  []message.BrokerID
	Parent map[message.BrokerID]message.BrokerID
}

// NewTree returns a tree with only a root.
func NewTree(root message.BrokerID) Tree {
	return Tree{Order: []message.BrokerID{root}, Parent: map[message.BrokerID]message.BrokerID{}}
}

// Add appends child under parent; the parent must be in the tree.
func (t *Tree) Add(parent, child message.BrokerID) error {
	if !t.Has(parent) {
		return fmt.Errorf("sim: tree: parent %s of %s is not in the tree yet", parent, child)
	}
	if t.Has(child) {
		return fmt.Errorf("sim: tree: %s appears twice", child)
	}
	t.Order = append(t.Order, child)
	t.Parent[child] = parent
	return nil
}

// Has reports whether id is in the tree.
func (t Tree) Has(id message.BrokerID) bool {
	if len(t.Order) > 0 && t.Order[0] == id {
		return true
	}
	_, ok := t.Parent[id]
	return ok
}

// Neighbours lists id's parent (first) and children (in join order).
func (t Tree) Neighbours(id message.BrokerID) []message.BrokerID {
	var out []message.BrokerID
	if p, ok := t.Parent[id]; ok {
		out = append(out, p)
	}
	for _, c := range t.Order {
		if t.Parent[c] == id && c != t.Order[0] {
			out = append(out, c)
		}
	}
	return out
}

// Ancestors lists id's parent, grandparent, ... up to n of them.
func (t Tree) Ancestors(id message.BrokerID, n int) []message.BrokerID {
	var out []message.BrokerID
	for len(out) < n {
		p, ok := t.Parent[id]
		if !ok {
			break
		}
		out = append(out, p)
		id = p
	}
	return out
}

// Path returns the brokers on the tree path from a to b, both included.
func (t Tree) Path(a, b message.BrokerID) []message.BrokerID {
	up := func(x message.BrokerID) []message.BrokerID {
		out := []message.BrokerID{x}
		for {
			p, ok := t.Parent[x]
			if !ok {
				return out
			}
			out = append(out, p)
			x = p
		}
	}
	pa, pb := up(a), up(b)
	inA := map[message.BrokerID]int{}
	for i, x := range pa {
		inA[x] = i
	}
	for j, x := range pb {
		if i, ok := inA[x]; ok {
			path := append([]message.BrokerID{}, pa[:i+1]...)
			for k := j - 1; k >= 0; k-- {
				path = append(path, pb[k])
			}
			return path
		}
	}
	return nil
}

// RandomTree builds an n-broker tree named B1..Bn. Each new broker attaches
// to a random earlier one, with a bias toward recent ones (long paths, so
// that δ adjacent brokers in a row exist) and a degree cap of maxDegree.
func RandomTree(r *rand.Rand, n, maxDegree int) Tree {
	t := NewTree("B1")
	deg := map[message.BrokerID]int{}
	for i := 2; i <= n; i++ {
		id := message.BrokerID(fmt.Sprintf("B%d", i))
		var p message.BrokerID
		for try := 0; ; try++ {
			k := len(t.Order)
			if r.IntN(2) == 0 {
				p = t.Order[k-1-r.IntN(min(k, 3))]
			} else {
				p = t.Order[r.IntN(k)]
			}
			if deg[p] < maxDegree || try > 20 {
				break
			}
		}
		deg[p]++
		deg[id]++
		_ = t.Add(p, id)
	}
	return t
}

// BuildTree creates the brokers of t, bootstraps the root and joins the
// others one after another, each through its parent (then its ancestors)
// and waiting until it has joined, at most maxJoin each. Joins of brokers
// already present are skipped.
func (s *Sim) BuildTree(t Tree, maxJoin time.Duration) error {
	for i, id := range t.Order {
		if _, ok := s.brokers[id]; ok {
			continue
		}
		if err := s.AddBroker(id); err != nil {
			return err
		}
		if i == 0 {
			if err := s.Bootstrap(id); err != nil {
				return err
			}
		} else if err := s.Join(id, t.Ancestors(id, s.cfg.Core.Delta+1)...); err != nil {
			return err
		}
		b := s.brokers[id]
		ok, err := s.RunUntilCond(maxJoin, b.isJoined)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("sim: %s did not join within %v (virtual)", id, maxJoin)
		}
	}
	return nil
}

// RestartJoinpoints is the shared policy (topology.RestartJoinpoints) on t.
func (t Tree) RestartJoinpoints(id message.BrokerID, delta int) []message.BrokerID {
	parent := func(x message.BrokerID) (message.BrokerID, bool) {
		p, ok := t.Parent[x]
		return p, ok
	}
	return topology.RestartJoinpoints(id, delta, parent, t.Neighbours)
}
