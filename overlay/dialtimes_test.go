package overlay

import (
	"testing"
	"time"
)

func TestDialPatience(t *testing.T) {
	if p := DialPatience(DialTimeout(1500*time.Millisecond), 30*time.Second); p != 6*time.Second {
		t.Errorf("patience at the srds09 timers = %v, want 6s", p)
	}
	if p := DialPatience(DialTimeout(250*time.Millisecond), 3*time.Second); p != 1500*time.Millisecond {
		t.Errorf("patience with gone_after 3s = %v, want 1.5s (half of it)", p)
	}
	if p := DialPatience(DialTimeout(5*time.Second), time.Second); p != 5*time.Second {
		t.Errorf("patience under the dial timeout: %v, want the dial timeout 5s", p)
	}
}
