package benchcompare

import (
	"context"
	"errors"
	"testing"
)

// flakySystem fails its first fails starts with err.
type flakySystem struct {
	system
	fails, starts int
	err           error
}

func (f *flakySystem) Start(context.Context, int) (servers, error) {
	f.starts++
	if f.starts <= f.fails {
		return nil, f.err
	}
	return nil, nil
}

// TestStartRetriesOnlyAPortTaken: a server that lost its port is started
// again, at most startAttempts times; any other failure is reported at once.
func TestStartRetriesOnlyAPortTaken(t *testing.T) {
	taken := errors.New("nats-server N3: listen tcp 127.0.0.1:33733: bind: address already in use")
	for _, c := range []struct {
		fails      int
		err        error
		wantStarts int
		wantErr    bool
	}{
		{0, nil, 1, false},
		{2, taken, 3, false},
		{5, taken, startAttempts, true},
		{1, errors.New("no such file"), 1, true},
	} {
		f := &flakySystem{fails: c.fails, err: c.err}
		_, err := start(context.Background(), f, 3)
		if f.starts != c.wantStarts || (err != nil) != c.wantErr {
			t.Errorf("fails %d of %v: %d starts, err %v; want %d starts, error %v", c.fails, c.err, f.starts, err, c.wantStarts, c.wantErr)
		}
	}
}
