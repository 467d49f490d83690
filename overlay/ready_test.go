package overlay

import (
	"testing"

	"github.com/deltapub/deltapub/message"
)

// A Ready handed back is reused for the outputs to come, cleared first
// (it keeps nothing alive), and never while outputs are already pending.
func TestReadyReuse(t *testing.T) {
	var out Ready
	done := Ready{
		Messages:  make([]Envelope, 3, 8),
		ToClients: make([]ClientEnvelope, 2, 4),
	}
	done.Messages[0].Msg = &message.Heartbeat{}
	done.ToClients[1].Msg = &message.PubAck{Seq: 1}
	backing := &done.Messages[:1][0]
	out.Reuse(done)
	if len(out.Messages) != 0 || cap(out.Messages) != 8 || len(out.ToClients) != 0 || cap(out.ToClients) != 4 {
		t.Fatalf("not reused: %d/%d messages, %d/%d to clients", len(out.Messages), cap(out.Messages), len(out.ToClients), cap(out.ToClients))
	}
	if backing.Msg != nil || done.ToClients[1].Msg != nil {
		t.Error("the reused entries still hold their messages")
	}
	out.Messages = append(out.Messages, Envelope{To: "B"})
	if &out.Messages[0] != backing {
		t.Error("the next output did not go into the reused array")
	}

	// Outputs already pending keep their own slice.
	pending := out.Messages
	out.Reuse(Ready{Messages: make([]Envelope, 0, 64)})
	if len(out.Messages) != 1 || &out.Messages[0] != &pending[0] {
		t.Error("a pending output was replaced")
	}
}
