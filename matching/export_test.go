package matching

// MatchWalked is Match walking the groups of every access list instead of
// their compiled copies (as before compilation existed), leaving the
// compiled copies as they are: the tests compare both.
func MatchWalked(ix *Index, p *Publication, dst []uint64) []uint64 {
	return ix.match(p, dst, false)
}

// SetProgMax sets the compilation bound, drops ix's compiled lists and
// returns the previous bound.
func SetProgMax(ix *Index, n int) int {
	old := progMax
	progMax = n
	for _, m := range ix.access {
		for _, al := range m {
			ix.dirty(al)
		}
	}
	return old
}
