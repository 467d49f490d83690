//go:build !race

package runtime

// raceBuild: see ws_race.go.
const raceBuild = false
