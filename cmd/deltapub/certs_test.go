package main

import "testing"

// deltapub certs refuses to run without --brokers (the certificates
// themselves: internal/quic TestMakeCertsLinkBrokers).
func TestCertsNeedsBrokers(t *testing.T) {
	if code := dispatch([]string{"certs", "--dir", t.TempDir()}); code != 2 {
		t.Fatalf("certs without --brokers exits %d, want 2", code)
	}
}
