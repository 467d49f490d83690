package quic

import "time"

var deadlineNone time.Time
