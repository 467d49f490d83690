// Package replicas is the replica-based baseline that the δ overlay is
// compared with (docs/baseline.md): the brokers of a tree are grouped into
// virtual nodes of k replicas with identical routing tables, after Bhola et
// al. (DSN 2002) as the SRDS'09 slides describe it. Like package overlay
// it is a pure, deterministic state machine (Step, Tick, Ready; time in
// ticks; no I/O), driven by the same environments.
package replicas

import (
	"fmt"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// MaxReplicas bounds k: replicas are named with one letter (R1a, R1b, …),
// and each replica links to k of every neighbouring virtual node.
const MaxReplicas = 8

// Layout is the static shape of a replicated overlay: a tree of virtual
// nodes, each of K replicas. Every replica is given the whole layout; it
// is not learnt at run time (the baseline has no join protocol).
type Layout struct {
	K       int
	VNodes  []VNode // the root first, parents before children
	where   map[message.BrokerID]place
	vnIndex map[string]int
}

// VNode is one virtual node: its name (the tree broker it replaces), its
// tree neighbours (indexes in Layout.VNodes) and its replicas.
type VNode struct {
	Name       string
	Parent     int // -1 for the root
	Neighbours []int
	Replicas   []overlay.Peer
}

type place struct{ vn, r int }

// ReplicaName names replica i (from 0) of virtual node vn: R1 becomes R1a,
// R1b, …
func ReplicaName(vn string, i int) string { return vn + string(rune('a'+i)) }

// NewLayout builds the layout of a tree (names in an order where every
// parent comes before its children, parent[name] = "" for the root) with
// k replicas per broker; addr gives each replica's address (nil: none,
// as in the simulator).
func NewLayout(names []string, parent map[string]string, k int, addr func(replica string) string) (*Layout, error) {
	if k < 2 || k > MaxReplicas {
		return nil, fmt.Errorf("replicas: %d replicas per virtual node: want 2..%d", k, MaxReplicas)
	}
	l := &Layout{K: k, where: map[message.BrokerID]place{}, vnIndex: map[string]int{}}
	idx := l.vnIndex
	for i, n := range names {
		if _, dup := idx[n]; dup {
			return nil, fmt.Errorf("replicas: virtual node %q twice", n)
		}
		idx[n] = i
		v := VNode{Name: n, Parent: -1}
		if p := parent[n]; p != "" {
			j, ok := idx[p]
			if !ok {
				return nil, fmt.Errorf("replicas: %q's parent %q is not listed before it", n, p)
			}
			v.Parent = j
			v.Neighbours = append(v.Neighbours, j)
			l.VNodes[j].Neighbours = append(l.VNodes[j].Neighbours, i)
		} else if i > 0 {
			return nil, fmt.Errorf("replicas: %q has no parent but is not the root", n)
		}
		for r := 0; r < k; r++ {
			id := ReplicaName(n, r)
			a := ""
			if addr != nil {
				a = addr(id)
			}
			if _, dup := l.where[message.BrokerID(id)]; dup {
				return nil, fmt.Errorf("replicas: replica name %s is taken (rename virtual node %q)", id, n)
			}
			l.where[message.BrokerID(id)] = place{i, r}
			v.Replicas = append(v.Replicas, overlay.Peer{ID: message.BrokerID(id), Addr: a})
		}
		l.VNodes = append(l.VNodes, v)
	}
	return l, nil
}

// Replicas lists every replica, virtual node by virtual node.
func (l *Layout) Replicas() []message.BrokerID {
	out := make([]message.BrokerID, 0, len(l.VNodes)*l.K)
	for _, v := range l.VNodes {
		for _, r := range v.Replicas {
			out = append(out, r.ID)
		}
	}
	return out
}

// VNodeOf returns the virtual node of a replica.
func (l *Layout) VNodeOf(id message.BrokerID) (string, bool) {
	p, ok := l.where[id]
	if !ok {
		return "", false
	}
	return l.VNodes[p.vn].Name, true
}

// rank orders replicas: a replica dials, at its first start, the peers
// ranked before it (they started first), so that each link is dialled once.
func (l *Layout) rank(id message.BrokerID) int {
	p := l.where[id]
	return p.vn*l.K + p.r
}
