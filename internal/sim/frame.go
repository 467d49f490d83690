package sim

// frameLimited is a node that splits messages too large for a frame
// (Config.MaxFrame): the simulator tells it the limit when it creates it.
type frameLimited interface {
	setMaxFrame(bytes int) error
}

func (o overlayNode) setMaxFrame(bytes int) error { return o.n.SetMaxFrame(bytes) }
