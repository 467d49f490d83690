//go:build race

package runtime

// raceBuild: under the race detector, plain ws is served like wss, by
// net/http (a goroutine per connection). nbio hands connections from its
// accepting goroutine to its pollers through epoll system calls, which the
// detector does not see as synchronisation: it reports nbio's own fields
// (nbio marks such functions //go:norace). The session code above the
// transport is the same in both and is raced here; nbio's path is tested
// without the detector.
const raceBuild = true
