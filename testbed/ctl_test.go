package testbed

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/admin"
)

// A control request to a broker whose admin endpoint does not listen yet
// (just restarted) is asked again until it does.
func TestControlRequestWaitsForTheAdminEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // refused until the server below starts
	got := make(chan string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.String() + " " + r.Header.Get(admin.ControlHeader)
	})}
	defer srv.Close()
	go func() {
		time.Sleep(300 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		srv.Serve(l)
	}()
	h := &procHost{ctl: &http.Client{Timeout: time.Second}}
	resp, err := h.postCtl("http://" + addr + "/ctl/cut?peer=B8")
	if err != nil {
		t.Fatalf("postCtl: %v", err)
	}
	resp.Body.Close()
	if g := <-got; g != "POST /ctl/cut?peer=B8 testbed" {
		t.Errorf("the endpoint got %q", g)
	}
}
