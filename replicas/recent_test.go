package replicas

import (
	"testing"

	"github.com/deltapub/deltapub/message"
)

// The window keeps the last maxRecent publications and gives them back
// oldest first, also once it has wrapped around.
func TestRecentPubsOldestFirst(t *testing.T) {
	var r recentPubs
	const n = maxRecent + 10
	for i := 1; i <= n; i++ {
		r.add(&message.ReplicaPub{ID: message.PubID{Seq: uint64(i)}})
	}
	want := uint64(n - maxRecent + 1)
	r.each(func(m *message.ReplicaPub) {
		if m.ID.Seq != want {
			t.Fatalf("got seq %d, want %d", m.ID.Seq, want)
		}
		want++
	})
	if want != n+1 {
		t.Fatalf("gave back up to %d, want %d", want-1, n)
	}
}
