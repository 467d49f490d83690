package testbed

import (
	"context"
	"fmt"
)

// unavailable is the backend of a mode whose dependencies have not landed
// yet: it fails clearly instead of pretending to run.
type unavailable struct{ mode, needs string }

func (u unavailable) Run(ctx context.Context, p *Plan, rec *Recorder) error {
	return fmt.Errorf("testbed: %s mode: %w (it needs %s)", u.mode, ErrNotAvailable, u.needs)
}

func init() {
	RegisterBackend("process", func(o Options) Backend { return processBackend{o} })
	RegisterBackend("inproc", func(o Options) Backend { return inprocBackend{o} })
	RegisterBackend("sim", func(Options) Backend {
		if simFactory == nil {
			return unavailable{"sim", "the protocol core's node factory in internal/sim"}
		}
		return simBackend{factory: simFactory}
	})
}
