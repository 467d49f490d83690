package e2e

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGTERMInteriorBrokerLeavesCleanly: a chain B1–B5 (δ = 2), a
// publisher at B1, a subscriber at B5. Once publications flow, B3 (in the
// middle: every publication crosses it) gets SIGTERM. It must leave the
// overlay gracefully (docs/protocol.md §3) and exit 0; the subscriber must
// get every publication exactly once in order; and the overlay must keep
// working: publications sent after B3 exited are delivered too (B2 and B4
// are tree neighbours now).
func TestSIGTERMInteriorBrokerLeavesCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test: skipped in -short mode")
	}
	const total, rate = 1000, 250
	secret := writeSecret(t, "e2e leave secret")
	bs := chain(t, 5, secret)
	sub := startSubscriber(t, bs[4].addr, total, 30*time.Second, "[class,eq,'E2E']")
	var pubOut bytes.Buffer
	pub := start(t, "pub", &lockedWriter{w: &pubOut}, "pub", "--broker", bs[0].addr, "--count", fmt.Sprint(total),
		"--rate", fmt.Sprint(rate), "--timeout", "30s", "[class,'E2E'],[symbol,'X']")
	sub.waitCount(t, total/5, 20*time.Second)
	term := time.Now()
	bs[2].signal(t, syscall.SIGTERM)
	t.Logf("SIGTERM to B3 after %d deliveries", sub.count())
	if err := bs[2].wait(t, 15*time.Second); err != nil {
		t.Errorf("B3 did not exit cleanly: %v", err)
	}
	atExit := sub.count()
	t.Logf("B3 exited %v after SIGTERM, after %d deliveries (logged, not asserted)", time.Since(term).Round(time.Millisecond), atExit)
	if err := pub.wait(t, 30*time.Second); err != nil {
		t.Errorf("pub: %v", err)
	}
	if err := sub.wait(t, 30*time.Second); err != nil {
		t.Errorf("sub: %v (after %d deliveries)", err, sub.count())
	}
	sub.checkExactlyOnceInOrder(t, total)
	if !strings.Contains(pubOut.String(), fmt.Sprintf("acknowledged %d of %d", total, total)) {
		t.Errorf("publisher: %q", pubOut.String())
	}
	if atExit >= total {
		t.Errorf("every publication was delivered before B3 exited: nothing checked the repaired overlay (raise total)")
	}
	// B3 says it left (not "exiting anyway"), and its neighbours saw a
	// graceful leave, not a crash.
	log, _ := os.ReadFile(bs[2].log)
	if !bytes.Contains(log, []byte("left the overlay")) || bytes.Contains(log, []byte("exiting anyway")) {
		t.Errorf("B3's log does not show a completed leave:\n%s", tail(log, 2000))
	}
	for _, i := range []int{1, 3} {
		if n := metric(t, bs[i].admin, `deltapub_notices_total{kind="member-left"}`); n < 1 {
			t.Errorf("%s: %v member-left notices, want 1", bs[i].id, n)
		}
		if n := metric(t, bs[i].admin, `deltapub_notices_total{kind="gone"}`); n != 0 {
			t.Errorf("%s declared a broker gone: the leave was taken for a crash", bs[i].id)
		}
	}
}
