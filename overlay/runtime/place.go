package runtime

import (
	"fmt"
	"slices"

	"github.com/deltapub/deltapub/internal/storage"
	"github.com/deltapub/deltapub/message"
)

// OpenStore opens cfg.DataDir (nil without one) and begins a new
// incarnation there (BeginIncarnation).
func OpenStore(cfg *BrokerConfig, epoch uint64) (storage.Store, uint64, error) {
	if cfg.DataDir == "" {
		return nil, epoch, nil
	}
	st, err := storage.Open(cfg.DataDir, cfg.ID)
	if err != nil {
		return nil, 0, err
	}
	epoch, err = BeginIncarnation(st, epoch)
	return st, epoch, err
}

// BeginIncarnation records a new incarnation in st: the epoch to use is
// at least epoch (EpochAt) and larger than every epoch begun in st before.
func BeginIncarnation(st storage.Store, epoch uint64) (uint64, error) {
	e, err := st.Begin(epoch)
	if err != nil {
		return 0, fmt.Errorf("data directory: %w", err)
	}
	return e, nil
}

// KeepState makes r rejoin through the place st holds and keep it up to
// date (every status refresh, when it changed). Call before Run.
func (r *Runtime) KeepState(st storage.Store) {
	r.store = st
	if st != nil {
		r.placed = st.Place()
	}
}

// joinList is what the broker joins through: its saved place first (the
// brokers that know it), then the configured joinpoints not already
// named, at most maxJoinpoints in all. A saved place also keeps a restarted
// root from bootstrapping a second overlay.
func (r *Runtime) joinList() []string {
	var out []string
	named := map[string]bool{}
	for _, jp := range r.placed {
		named[jp.ID] = true
		out = append(out, jp.ID+"@"+jp.Addr)
	}
	for _, j := range r.cfg.Join {
		if id := SplitJoinpoint(j).ID; id == "" || !named[string(id)] {
			out = append(out, j)
		}
	}
	return out[:min(len(out), maxJoinpoints)]
}

// maxJoinpoints bounds the joinpoints tried (as the configuration's join).
const maxJoinpoints = 16

// savePlace saves the core's place if it changed: while the broker is a
// joined member (overlay.Node.Place), and none once it has left. A broker
// joining, recovering or leaving keeps the place it saved before. A failed write is logged and tried again at the next refresh; the
// broker goes on (without the place, a restart joins through Join).
func (r *Runtime) savePlace() {
	if r.store == nil {
		return
	}
	var place []storage.Joinpoint
	if !r.left {
		cur := r.node.Place()
		if cur == nil {
			return // joining, recovering or leaving: the saved place stays
		}
		for _, p := range cur {
			place = append(place, storage.Joinpoint{ID: string(p.ID), Addr: p.Addr})
		}
	}
	if slices.Equal(place, r.placed) {
		return
	}
	if err := r.store.SavePlace(place); err != nil {
		r.log.Error().Err(err).Msg("cannot save the broker's place in its data directory")
		return
	}
	r.placed = place
	ids := make([]message.BrokerID, len(place))
	for i, p := range place {
		ids[i] = message.BrokerID(p.ID)
	}
	r.log.Debug().Interface("place", ids).Msg("place saved")
}
