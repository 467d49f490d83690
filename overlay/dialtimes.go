package overlay

import "time"

// The runtime's dial times, here so that the runtime and the simulator
// (which draws what the runtime does) share one definition.

// DialTimeout is how long the core waits for a dial: the failure timeout,
// within 500 ms .. 5 s (a frozen peer never answers its handshake).
func DialTimeout(failureTimeout time.Duration) time.Duration {
	return min(max(failureTimeout, 500*time.Millisecond), 5*time.Second)
}

// DialPatience bounds a dial's handshake once the core was told it failed
// (DialTimeout): max(4 × the dial timeout, 5 s), since a live peer on a
// starved machine answers late, but at most half of gone_after (and never
// under the dial timeout): a handshake still in flight when gone_after ends
// would let a live peer be declared gone, since a dial in flight is not
// asked again.
func DialPatience(dialTimeout, goneAfter time.Duration) time.Duration {
	return max(dialTimeout, min(max(4*dialTimeout, 5*time.Second), goneAfter/2))
}
