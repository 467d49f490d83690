package admin

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

type stubControl struct{ cut []string }

func (c *stubControl) Cut(peer string) error {
	if peer == "self" {
		return errors.New("that is this broker")
	}
	if !slices.Contains(c.cut, peer) {
		c.cut = append(c.cut, peer)
	}
	return nil
}

func (c *stubControl) Heal(peer string) (bool, error) {
	i := slices.Index(c.cut, peer)
	if i < 0 {
		return false, nil
	}
	c.cut = slices.Delete(c.cut, i, i+1)
	return true, nil
}

func (c *stubControl) Cuts() []string { return append([]string{}, c.cut...) }

func TestControlEndpoints(t *testing.T) {
	ctl := &stubControl{}
	h := Handler(Options{Control: ctl, ControlToken: "s3cret"})
	do := func(method, url, remote string, hdr map[string]string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(method, url, nil)
		req.RemoteAddr = remote
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, strings.TrimSpace(string(b))
	}
	local := "127.0.0.1:5555"
	good := map[string]string{ControlHeader: "1", "Authorization": "Bearer s3cret"}
	cases := []struct {
		name, method, url, remote string
		hdr                       map[string]string
		code                      int
		body                      string
	}{
		{"remote caller", "POST", "/ctl/cut?peer=B2", "10.0.0.7:4444", good, 403, "loopback"},
		{"no control header", "POST", "/ctl/cut?peer=B2", local, map[string]string{"Authorization": "Bearer s3cret"}, 403, ControlHeader},
		{"wrong token", "POST", "/ctl/cut?peer=B2", local, map[string]string{ControlHeader: "1", "Authorization": "Bearer nope"}, 403, "token"},
		{"GET cut", "GET", "/ctl/cut?peer=B2", local, good, 405, ""},
		{"no peer", "POST", "/ctl/cut", local, good, 400, "peer"},
		{"peer with space", "POST", "/ctl/cut?peer=B2%20B3", local, good, 400, "peer"},
		{"cut refused", "POST", "/ctl/cut?peer=self", local, good, 400, "this broker"},
		{"cut", "POST", "/ctl/cut?peer=B2", local, good, 200, "ok"},
		{"cut over IPv6 loopback", "POST", "/ctl/cut?peer=B3", "[::1]:5555", good, 200, "ok"},
		{"list", "GET", "/ctl/cuts", local, good, 200, `["B2","B3"]`},
		{"heal", "POST", "/ctl/heal?peer=B2", local, good, 200, "ok"},
		{"heal not cut", "POST", "/ctl/heal?peer=B2", local, good, 404, "not cut"},
		{"list after heal", "GET", "/ctl/cuts", local, good, 200, `["B3"]`},
	}
	for _, c := range cases {
		code, body := do(c.method, c.url, c.remote, c.hdr)
		if code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("%s: %s %s = %d %q, want %d containing %q", c.name, c.method, c.url, code, body, c.code, c.body)
		}
	}
	if !slices.Equal(ctl.cut, []string{"B3"}) {
		t.Errorf("cut peers = %v, want [B3]", ctl.cut)
	}
}

func TestControlOffWithoutControl(t *testing.T) {
	h := Handler(Options{})
	req := httptest.NewRequest("POST", "/ctl/cut?peer=B2", nil)
	req.RemoteAddr = "127.0.0.1:1"
	req.Header.Set(ControlHeader, "1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusNotFound && w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /ctl/cut without a Control = %d, want 404", w.Code)
	}
}
