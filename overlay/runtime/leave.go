package runtime

// HasLeft reports whether Run has returned after a completed graceful
// leave: the neighbourhood confirmed it, so the overlay repaired the tree
// around this broker rather than treating it as crashed. It is false while
// Run is running, and when Run ended otherwise (no leave, or a leave that
// was not confirmed within its bound). Testbeds use it to tell a clean
// leave from one that timed out (cmd/deltapub broker logs the difference).
func (r *Runtime) HasLeft() bool {
	select {
	case <-r.done:
		return r.left // written only by Run's goroutine, which closed done after
	default:
		return false
	}
}
