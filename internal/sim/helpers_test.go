package sim

import "time"

func toDur(i int) time.Duration { return time.Duration(i) }
