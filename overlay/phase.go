package overlay

import "fmt"

// Phase is where one incarnation of a broker stands in its membership
// state machine (docs/protocol.md §3, "Membership is one state machine per
// incarnation"): each message and timer of a join, a recovery or a leave
// is handled by the rules of the current phase.
type Phase uint8

const (
	PhaseNew        Phase = iota // created; neither Bootstrap nor Join called
	PhaseJoining                 // walking its joinpoints (retry.go)
	PhaseAdmitted                // a new member: admitted, its joinpoint's topology flood not confirmed yet
	PhaseRecovering              // a known member back under a new epoch: collecting its neighbours' state (recovery.go)
	PhaseJoined                  // a full member: routable, admits joiners
	PhaseLeaving                 // draining and repairing the tree around it (leave.go)
	PhaseLeft                    // gone from the overlay; takes no input
)

var phaseNames = [...]string{"new", "joining", "admitted", "recovering", "joined", "leaving", "left"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// Phase returns the node's membership phase.
func (n *Node) Phase() Phase {
	m := &n.mem
	switch {
	case m.left:
		return PhaseLeft
	case m.leaving:
		return PhaseLeaving
	case m.joined:
		return PhaseJoined
	case m.member && m.rejoin:
		return PhaseRecovering
	case m.member:
		return PhaseAdmitted
	case len(m.jn.points) > 0:
		return PhaseJoining
	}
	return PhaseNew
}

// LegalPhaseChange reports whether an incarnation may move from one phase
// to the next (the order of the table in docs/protocol.md §3): forward
// only, joining through admitted or recovering (a recovery with nobody to
// ask completes on the JoinReply itself, so joining may be seen to move to
// joined at once), and leaving only once joined.
func LegalPhaseChange(from, to Phase) bool {
	switch from {
	case PhaseNew:
		return to == PhaseJoining || to == PhaseJoined
	case PhaseJoining:
		return to == PhaseAdmitted || to == PhaseRecovering || to == PhaseJoined
	case PhaseAdmitted, PhaseRecovering:
		return to == PhaseJoined
	case PhaseJoined:
		return to == PhaseLeaving
	case PhaseLeaving:
		return to == PhaseLeft
	}
	return false
}
