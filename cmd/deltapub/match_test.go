package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// capture runs f with stdout and stderr redirected and returns what it
// printed on each.
func capture(t *testing.T, f func() int) (code int, stdout, stderr string) {
	t.Helper()
	or, ow, _ := os.Pipe()
	er, ew, _ := os.Pipe()
	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = ow, ew
	outc, errc := make(chan string), make(chan string)
	go func() { b, _ := io.ReadAll(or); outc <- string(b) }()
	go func() { b, _ := io.ReadAll(er); errc <- string(b) }()
	code = f()
	os.Stdout, os.Stderr = oldOut, oldErr
	ow.Close()
	ew.Close()
	return code, <-outc, <-errc
}

func TestMatchCommand(t *testing.T) {
	cases := []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"--filter", "[class,eq,'STOCK'],[price,>,100]", "--pub", "[class,'STOCK'],[price,120.5]"}, 0, "match\n", ""},
		{[]string{"--filter", "[class,eq,'STOCK'],[price,>,100]", "--pub", `{"class":"STOCK","price":99}`}, 1, "no match\n", ""},
		{[]string{"--explain", "--filter", "[class,eq,'STOCK'],[price,>,100]", "--pub", `{"class":"STOCK","price":99}`}, 1, "no match\npredicate 2 [price,>,100]: 99 > 100 is false\n", ""},
		{[]string{"--filter", "[class,eq,'STOCK'],[price,=>,100]", "--pub", "[class,'STOCK']"}, 2, "", `matching: col 27: unknown operator "=>"`},
		{[]string{"--filter", "[class,eq,'STOCK']", "--pub", `{"class":true}`}, 2, "", "--pub: matching: col"},
		{[]string{"--filter", "[class,eq,'STOCK']"}, 2, "", "required"},
	}
	for _, c := range cases {
		code, out, errOut := capture(t, func() int { return dispatch(append([]string{"match"}, c.args...)) })
		if code != c.code || out != c.out || !strings.Contains(errOut, c.err) {
			t.Errorf("match %q: exit %d, stdout %q, stderr %q; want %d, %q, stderr containing %q", c.args, code, out, errOut, c.code, c.out, c.err)
		}
	}
}
