// Package web holds what a broker's WebSocket listener serves to browsers:
// the JavaScript client (deltapub.js, a plain ES module) and an example
// page (index.html). See docs/websocket.md.
package web

import "embed"

// FS holds index.html and deltapub.js.
//
//go:embed index.html deltapub.js
var FS embed.FS
