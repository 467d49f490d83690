//go:build !unix

package main

import "time"

// cpuTime is not measured on this platform (0: only wall time is shown).
func cpuTime() time.Duration { return 0 }
