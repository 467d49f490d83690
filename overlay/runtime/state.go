// What the runtime tells about itself: health, the core's status and the
// /state snapshot (the core's Status with the runtime around it).

package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// Health is nil when the broker is a full member, else why not.
func (r *Runtime) Health(ctx context.Context) error {
	if r.joined.Load() && !r.logHasFailed.Load() {
		return nil
	}
	var why error
	err := r.Do(ctx, func(n Core) {
		st := n.Status()
		switch {
		case r.logFailed() != nil:
			why = fmt.Errorf("publication log failed (no publication is acknowledged until a restart): %w", r.logFailed())
		case st.Left:
			why = errors.New("left the overlay")
		case st.Leaving:
			why = errors.New("leaving the overlay")
		case st.Joined:
			why = nil
		case r.joinFailed != "":
			why = errors.New("join failed: " + r.joinFailed)
		default:
			why = errors.New("not joined yet")
		}
	})
	if err != nil {
		return err
	}
	return why
}

// Status returns the core's snapshot, taken on the runtime goroutine.
func (r *Runtime) Status(ctx context.Context) (overlay.Status, error) {
	var st overlay.Status
	err := r.Do(ctx, func(n Core) { st = n.Status() })
	return st, err
}

func (r *Runtime) refreshStatus() {
	st := r.node.Status()
	r.joined.Store(st.Joined && !st.Left && !st.Leaving)
	r.m.setSnapshot(st)
}

// State is what /state serves: the core's overlay.Status (its fields at the top
// level of the JSON object) and what the runtime adds.
type State struct {
	overlay.Status
	Runtime RuntimeState `json:"runtime"`
	Log     *LogState    `json:"log,omitempty"`  // the publication log (durable.go)
	Held    *HeldState   `json:"held,omitempty"` // the held log (durable.go)
}

// RuntimeState describes the runtime around the core.
type RuntimeState struct {
	Addr           string             `json:"addr"`
	Delta          int                `json:"delta"`
	Tick           string             `json:"tick"`
	Heartbeat      string             `json:"heartbeat"`
	FailureTimeout string             `json:"failure_timeout"`
	Connected      []message.BrokerID `json:"connected"` // peers with a transport link, sorted
	Dialing        []message.BrokerID `json:"dialing"`   // dials in flight, sorted
	Sessions       int                `json:"sessions"`
	InputQueue     int                `json:"input_queue"`
	JoinFailed     string             `json:"join_failed,omitempty"`
}

// State returns the snapshot served on /state, taken on the runtime
// goroutine.
func (r *Runtime) State(ctx context.Context) (State, error) {
	var st State
	err := r.Do(ctx, func(n Core) {
		st.Status = n.Status()
		rs := &st.Runtime
		rs.Addr = r.cfg.AdvertisedAddr()
		rs.Delta = r.cfg.Delta
		rs.Tick = r.cfg.Tick.String()
		rs.Heartbeat = r.cfg.Heartbeat.String()
		rs.FailureTimeout = r.cfg.FailureTimeout.String()
		rs.Connected = sortedKeys(r.links)
		rs.Dialing = sortedKeys(r.dialing)
		rs.Sessions = len(r.sessions)
		rs.InputQueue = len(r.in)
		rs.JoinFailed = r.joinFailed
		st.Log = r.logState()
		st.Held = r.heldState()
	})
	return st, err
}
