package web_test

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/message"
)

// deltapub.js's checkpoint tokens are the Go client's, byte for byte: a
// token made in JS decodes in Go, and the reverse, so a durable
// subscription can move between a browser and a Go program.
func TestJSCheckpointTokenIsTheGoOne(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if _, cerr := os.Stat(chromium); cerr == nil {
			t.Fatal("chromium is installed but node is not: apt-get install nodejs npm (.ci/run does)")
		}
		t.Skip("no node on this machine")
	}
	src, err := os.ReadFile("deltapub.js")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// .mjs: an ES module for every node version.
	if err := os.WriteFile(filepath.Join(dir, "deltapub.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	tok := checkpoint.Token{Name: "screen-é"}
	_ = tok.Consume(message.Source{Publisher: "zeta", Epoch: 1733112000000}, 5)
	_ = tok.Consume(message.Source{Publisher: "alpha", Epoch: 3}, 300)
	_ = tok.Advance(message.Source{Publisher: "alpha", Epoch: 3}, 1<<40)
	_ = tok.Consume(message.Source{Publisher: "alpha", Epoch: 2}, 1)
	goTok := base64.StdEncoding.EncodeToString(tok.Encode())
	script := `import { Token } from "./deltapub.mjs";
const t = new Token("screen-é");
t.consume("zeta", 1733112000000, 5);
t.consume("alpha", 3, 300);
t.advance("alpha", 3, 2 ** 40);
t.consume("alpha", 2, 1);
const u = Token.decode(process.argv[2]);
console.log(t.encode(), u.name, u.from("alpha", 3), u.from("zeta", 1733112000000), u.encode() === process.argv[2]);
`
	if err := os.WriteFile(filepath.Join(dir, "t.mjs"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "t.mjs", goTok)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 5 {
		t.Fatalf("node printed %q", out)
	}
	if f[0] != goTok {
		t.Errorf("JS encodes %s, Go %s", f[0], goTok)
	}
	if f[1] != "screen-é" || f[2] != "1099511627776" || f[3] != "5" || f[4] != "true" {
		t.Errorf("JS decoded the Go token as %q", f[1:])
	}
}
