package testbed

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const goodBase = `name = "t"
seed = 3
duration = "10s"
warmup = "1s"

[overlay]
delta = 2

[topology]
kind = "balanced"
brokers = 7
fanout = 2

[[publishers]]
count = 2
brokers = ["B1"]
rate = 10
attrs = { class = "'STOCK'", price = "uniform(0,100)" }

[[subscribers]]
count = 3
brokers = "leaves"
filter = "[class,eq,'STOCK'],[price,>,{uniform(0,100)}]"

[[faults]]
at = "4s"
crash = ["B2", "B4"]

[[faults]]
at = "6s"
restart = ["B2"]
`

func TestExamplesValidate(t *testing.T) {
	files, err := filepath.Glob("examples/*.toml")
	if err != nil || len(files) < 3 {
		t.Fatalf("want at least 3 examples, got %v (%v)", files, err)
	}
	for _, f := range files {
		p, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(p.Publishers) == 0 || len(p.Subscribers) == 0 {
			t.Errorf("%s: no clients", f)
		}
	}
}

func TestQuickstartShape(t *testing.T) {
	p, err := Load("examples/quickstart.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Topo.Names) != 10 || p.Spec.Overlay.Delta != 2 || len(p.Faults) != 2 {
		t.Fatalf("quickstart: %s", p.Describe())
	}
	// The two crashed brokers are adjacent.
	c := p.Faults[0].Actions
	if len(c) != 2 || p.Topo.Parent[c[1].Broker] != c[0].Broker {
		t.Fatalf("quickstart crashes %v are not adjacent", c)
	}
}

func TestSRDS09Topology(t *testing.T) {
	p, err := Load("examples/srds09.toml")
	if err != nil {
		t.Fatal(err)
	}
	tp := p.Topo
	if len(tp.Names) != SRDS09Brokers || p.Spec.Overlay.Delta != 3 {
		t.Fatalf("srds09: %d brokers, δ=%d", len(tp.Names), p.Spec.Overlay.Delta)
	}
	if tp.Parent["R2"] != "R1" || tp.Parent["R3"] != "R2" {
		t.Fatalf("R1–R2–R3 not in a row: parents %q %q", tp.Parent["R2"], tp.Parent["R3"])
	}
	subs := 0
	for _, s := range p.Subscribers {
		subs += len(s.Filters)
	}
	if subs != 2600 || len(p.Publishers) != 26 {
		t.Fatalf("srds09: %d subscriptions, %d publishers; want 2600, 26", subs, len(p.Publishers))
	}
	// R1, R2 and R3 lie on the path between every publisher and every
	// subscriber under B20.
	for _, pb := range p.Publishers {
		path := tp.Path(pb.Broker, "B20")
		for _, r := range []string{"R1", "R2", "R3"} {
			if !contains(path, r) {
				t.Fatalf("path %v from publisher %s misses %s", path, pb.Name, r)
			}
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestGeneratedNamesBreadthFirst(t *testing.T) {
	cases := []struct {
		kind    string
		n, f    int
		parents map[string]string
	}{
		{"chain", 4, 0, map[string]string{"B1": "", "B2": "B1", "B3": "B2", "B4": "B3"}},
		{"star", 3, 0, map[string]string{"B1": "", "B2": "B1", "B3": "B1"}},
		{"balanced", 6, 2, map[string]string{"B1": "", "B2": "B1", "B3": "B1", "B4": "B2", "B5": "B2", "B6": "B3"}},
	}
	for _, c := range cases {
		src := strings.Replace(goodBase, "kind = \"balanced\"\nbrokers = 7\nfanout = 2", "kind = \""+c.kind+"\"\nbrokers = "+itoa(c.n)+"\nfanout = "+itoa(c.f), 1)
		src = strings.Replace(src, `crash = ["B2", "B4"]`, `crash = ["B2"]`, 1)
		p, err := Parse(c.kind+".toml", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", c.kind, err)
		}
		if !reflect.DeepEqual(p.Topo.Parent, c.parents) {
			t.Errorf("%s: parents %v, want %v", c.kind, p.Topo.Parent, c.parents)
		}
	}
	// random: breadth-first names, so every parent has a smaller number.
	src := strings.Replace(goodBase, "kind = \"balanced\"\nbrokers = 7", "kind = \"random\"\nbrokers = 30", 1)
	p, err := Parse("random.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range p.Topo.Names {
		if n != "B"+itoa(i+1) {
			t.Fatalf("random: name %d is %s", i, n)
		}
		if par := p.Topo.Parent[n]; i > 0 && indexOf(p.Topo.Names, par) >= i {
			t.Fatalf("random: %s has parent %s later in breadth-first order", n, par)
		}
		if len(p.Topo.Children[n]) > 2 {
			t.Fatalf("random: %s has %d children, fanout 2", n, len(p.Topo.Children[n]))
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

// TestBadFiles: every bad file fails naming the line and the problem.
func TestBadFiles(t *testing.T) {
	repl := func(old, new string) string {
		if !strings.Contains(goodBase, old) {
			t.Fatalf("test setup: %q not in base", old)
		}
		return strings.Replace(goodBase, old, new, 1)
	}
	cases := []struct {
		name string
		src  string
		line int
		want string
	}{
		{"unknown top key", repl("seed = 3", "seed = 3\nspeed = 4"), 3, `unknown key "speed"`},
		{"unknown overlay key", repl("delta = 2", "delta = 2\ndleta = 3"), 8, `unknown key "overlay.dleta"`},
		{"unknown fault key", repl("restart = [\"B2\"]", "restart = [\"B2\"]\nreboot = [\"B3\"]"), 32, `unknown key "faults[1].reboot"`},
		{"unknown attr-table key in publishers", repl("rate = 10", "rate = 10\nrat = 3"), 18, `unknown key "publishers[0].rat"`},
		{"delta zero", repl("delta = 2", "delta = 0"), 7, "δ must be ≥ 1"},
		{"delta negative", repl("delta = 2", "delta = -1"), 7, "δ must be ≥ 1"},
		{"unknown durability", repl("delta = 2", "delta = 2\ndurability = \"sometimes\""), 8, `durability = "sometimes": one of fsync, write, memory, none`},
		{"unknown broker in fault", repl(`crash = ["B2", "B4"]`, `crash = ["B2", "B99"]`), 27, `unknown broker "B99" in crash`},
		{"fault before start", repl(`at = "4s"`, `at = "500ms"`), 26, "before the start"},
		{"fault after end", repl(`at = "6s"`, `at = "12s"`), 30, "after the end"},
		{"restart of a live broker", repl(`restart = ["B2"]`, `restart = ["B3"]`), 31, "restart B3 at 6s: it is not crashed"},
		{"rate zero", repl("rate = 10", "rate = 0"), 17, "rate = 0"},
		{"rate negative", repl("rate = 10", "rate = -5"), 17, "must be > 0"},
		{"bad generator", repl("uniform(0,100)\" }", "unifrom(0,100)\" }"), 18, `unknown generator "unifrom"`},
		{"bad uniform bounds", repl("uniform(0,100)\" }", "uniform(100,0)\" }"), 18, "needs a < b"},
		{"bad filter generator", repl("{uniform(0,100)}", "{zipf()}"), 23, "zipf(x1,x2,…) needs at least one value"},
		{"unterminated brace", repl("{uniform(0,100)}", "{uniform(0,100)"), 23, "unterminated '{'"},
		{"bad filter syntax", repl("[price,>,{uniform(0,100)}]", "[price,=>,{uniform(0,100)}]"), 23, "unknown operator"},
		{"unknown topology kind", repl(`kind = "balanced"`, `kind = "ring"`), 10, `unknown topology kind "ring"`},
		{"unknown selector broker", repl(`brokers = ["B1"]`, `brokers = ["B0"]`), 16, `unknown broker "B0"`},
		{"bad duration", repl(`duration = "10s"`, `duration = "10 parsecs"`), 3, "bad duration"},
		{"duration as number", repl(`duration = "10s"`, `duration = 10`), 3, ""},
		{"toml syntax", repl("seed = 3", "seed = = 3"), 2, ""},
		{"failure timeout not above heartbeat", repl("delta = 2", "delta = 2\nheartbeat = \"300ms\""), 8, "must be longer than heartbeat"},
		{"cut with itself", repl(`restart = ["B2"]`, `restart = ["B2"]`+"\ncut = [[\"B3\",\"B3\"]]"), 32, "with itself"},
		{"heal of an uncut link", repl(`restart = ["B2"]`, `restart = ["B2"]`+"\nheal = [[\"B1\",\"B3\"]]"), 32, "that link is not cut"},
		// Graceful leaves: a broker that left is gone for good.
		{"restart of a broker that left", repl(`crash = ["B2", "B4"]`, `leave = ["B2"]`), 31, "restart B2 at 6s: it left the overlay at 4s, for good"},
		{"unknown broker in leave", repl(`restart = ["B2"]`, `restart = ["B2"]`+"\nleave = [\"B99\"]"), 32, `unknown broker "B99" in leave`},
		{"leave of a crashed broker", repl(`restart = ["B2"]`, `leave = ["B4"]`), 31, "leave B4 at 6s: it is crashed"},
		{"leave twice in one fault", repl(`restart = ["B2"]`, `restart = ["B2"]`+"\nleave = [\"B3\", \"B3\"]"), 32, `broker "B3" twice in leave`},
		{"leave twice", goodBase + later("leave", "B3", "leave", `["B3"]`), 38, "leave B3 at 8s: B3 left the overlay at 7s"},
		{"leave of a frozen broker", goodBase + later("freeze", "B3", "leave", `["B3"]`), 38, "leave B3 at 8s: it is frozen"},
		{"crash of a broker that left", goodBase + later("leave", "B3", "crash", `["B3"]`), 38, "crash B3 at 8s: B3 left the overlay at 7s"},
		{"cut with a broker that left", goodBase + later("leave", "B3", "cut", `[["B1", "B3"]]`), 38, "cut B1-B3 at 8s: B3 left the overlay at 7s"},
		{"freeze of a broker that left", goodBase + later("leave", "B3", "freeze", `["B3"]`), 38, "freeze B3 at 8s: B3 left the overlay at 7s"},
		{"unknown inproc transport", goodBase + "\n[inproc]\ntransport = \"tcp\"\n", 34, `transport = "tcp": must be "memory" (default) or "quic"`},
		{"empty inproc transport", goodBase + "\n[inproc]\ntransport = \"\"\n", 34, `transport = "": must be`},
	}
	for _, c := range cases {
		_, err := Parse("bad.toml", []byte(c.src))
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		var es Errors
		if !errors.As(err, &es) || len(es) == 0 {
			t.Errorf("%s: error %v is not testbed.Errors", c.name, err)
			continue
		}
		if es[0].Line != c.line {
			t.Errorf("%s: line %d, want %d (%v)", c.name, es[0].Line, c.line, err)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not say %q", c.name, err, c.want)
		}
		if !strings.Contains(err.Error(), "bad.toml:") {
			t.Errorf("%s: error %q does not name the file", c.name, err)
		}
	}
}

// later appends two faults to goodBase (31 lines): kind1 of b at 7s, then
// kind2 = value at 8s (on line 38).
func later(kind1, b, kind2, value string) string {
	return "\n[[faults]]\nat = \"7s\"\n" + kind1 + " = [\"" + b + "\"]\n[[faults]]\nat = \"8s\"\n" + kind2 + " = " + value + "\n"
}

// TestLeavePlan: a leave is an action of its fault, may follow a crash and
// restart of the same broker, leaves other brokers free to fail and
// restart, and refuses only a file where every broker would leave.
func TestLeavePlan(t *testing.T) {
	src := goodBase + "\n[[faults]]\nat = \"7s\"\nleave = [\"B2\", \"B6\"]\n[[faults]]\nat = \"8s\"\ncrash = [\"B5\"]\n[[faults]]\nat = \"9s\"\nrestart = [\"B5\"]\n"
	p := mustParse(t, src)
	if len(p.Faults) != 5 {
		t.Fatalf("faults: %v", p.Faults)
	}
	f := p.Faults[2]
	want := []Action{{Kind: ActLeave, Broker: "B2", Line: 35}, {Kind: ActLeave, Broker: "B6", Line: 35}}
	if !reflect.DeepEqual(f.Actions, want) || f.String() != "leave B2, leave B6" {
		t.Fatalf("leave fault: %+v (%s)", f.Actions, f)
	}
	// Every broker leaving is refused (one line: the fault that empties
	// the overlay).
	all := strings.Replace(goodBase, `crash = ["B2", "B4"]`, `leave = ["B1", "B2", "B3", "B4", "B5", "B6", "B7"]`, 1)
	all = strings.Replace(all, "[[faults]]\nat = \"6s\"\nrestart = [\"B2\"]\n", "", 1)
	_, err := Parse("all.toml", []byte(all))
	if err == nil || err.Error() != "testbed: all.toml:26: fault at 4s: every broker would have left the overlay" {
		t.Fatalf("every broker leaving: %v", err)
	}
}

// TestTopologyDetach: the planned tree follows the overlay's repair after a
// leave (topology.Map.Detach): an interior broker's children go to its
// parent; a leaving root is replaced by its smallest child, which adopts
// the others; restarts then rejoin through the current ancestors.
func TestTopologyDetach(t *testing.T) {
	base := fromParents(balancedParents(7, 2), nil) // B1 ─ B2 (B4, B5), B3 (B6, B7)
	tp := base.clone()
	tp.detach("B2")
	if tp.Has("B2") || tp.Parent["B4"] != "B1" || tp.Parent["B5"] != "B1" || !slices.Equal(tp.Children["B1"], []string{"B3", "B4", "B5"}) {
		t.Fatalf("detach B2: parents %v children %v", tp.Parent, tp.Children)
	}
	if got := joinpointsFor(tp, "B4", 2); !slices.Equal(got, []string{"B1"}) {
		t.Fatalf("joinpoints of B4 after B2 left: %v", got)
	}
	if !base.Has("B2") || base.Parent["B4"] != "B2" {
		t.Fatal("detach changed the plan's own topology")
	}
	tp.detach("B1")
	if tp.Names[0] != "B3" || tp.Parent["B3"] != "" || tp.Parent["B4"] != "B3" || tp.Parent["B5"] != "B3" || tp.Parent["B6"] != "B3" {
		t.Fatalf("detach root B1: names %v parents %v", tp.Names, tp.Parent)
	}
	if got := joinpointsFor(tp, "B5", 2); !slices.Equal(got, []string{"B3"}) {
		t.Fatalf("joinpoints of B5 after B1 left: %v", got)
	}
	// A restart has δ+1 joinpoints: its ancestors, then the nearest
	// others (here B5's siblings, in B3's order of children).
	if got := rejoinpointsFor(tp, "B5", 2); !slices.Equal(got, []string{"B3", "B6", "B7"}) {
		t.Fatalf("rejoinpoints of B5 after B1 left: %v", got)
	}
	if got := rejoinpointsFor(base, "B1", 2); !slices.Equal(got, []string{"B2", "B3", "B4"}) {
		t.Fatalf("rejoinpoints of the root B1: %v", got)
	}
	if got := rejoinpointsFor(base, "B1", 0); !slices.Equal(got, []string{"B2"}) {
		t.Fatalf("rejoinpoints of the root B1, δ=0: %v", got) // δ+1 children at most
	}
	if got := rejoinpointsFor(base, "B2", 1); !slices.Equal(got, []string{"B1", "B4"}) {
		t.Fatalf("rejoinpoints of B2, δ=1: %v", got)
	}
	tp.detach("B7") // a leaf
	if tp.Has("B7") || slices.Contains(tp.Children["B3"], "B7") || len(tp.Names) != 4 {
		t.Fatalf("detach leaf B7: names %v children %v", tp.Names, tp.Children)
	}
}

func TestExplicitTopology(t *testing.T) {
	base := strings.Replace(goodBase, "kind = \"balanced\"\nbrokers = 7\nfanout = 2", "kind = \"explicit\"", 1)
	base = strings.Replace(base, `crash = ["B2", "B4"]`, `crash = ["B2"]`, 1)
	ok := base + `
[[broker]]
name = "B1"

[[broker]]
name = "B2"
join = "B1"

[[broker]]
name = "B3"
join = "B2"
`
	p, err := Parse("ok.toml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Topo.Path("B3", "B1"); !reflect.DeepEqual(got, []string{"B3", "B2", "B1"}) {
		t.Fatalf("path %v", got)
	}
	cyc := base + `
[[broker]]
name = "B1"

[[broker]]
name = "B2"
join = "B3"

[[broker]]
name = "B3"
join = "B2"
`
	_, err = Parse("cyc.toml", []byte(cyc))
	var es Errors
	if !errors.As(err, &es) || !strings.Contains(err.Error(), "cycle") || es[0].Line == 0 {
		t.Fatalf("cycle: %v", err)
	}
	lines := strings.Split(cyc, "\n")
	if l := lines[es[0].Line-1]; !strings.Contains(l, "join") {
		t.Fatalf("cycle error names line %d %q, want a join line", es[0].Line, l)
	}
	unknown := strings.Replace(ok, `join = "B2"`, `join = "B9"`, 1)
	if _, err := Parse("u.toml", []byte(unknown)); err == nil || !strings.Contains(err.Error(), `unknown broker "B9"`) {
		t.Fatalf("unknown join: %v", err)
	}
}

func TestGeneratorDeterminism(t *testing.T) {
	a, err := Parse("a.toml", []byte(goodBase))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Parse("a.toml", []byte(goodBase))
	for i := range a.Subscribers {
		if !reflect.DeepEqual(a.Subscribers[i].Filters, b.Subscribers[i].Filters) {
			t.Fatalf("filters differ between two parses: %v vs %v", a.Subscribers[i].Filters, b.Subscribers[i].Filters)
		}
	}
	draw := func(p *Plan) []PubEvent {
		var out []PubEvent
		for _, pb := range p.Publishers {
			st := pb.Stream()
			for ev, ok := st.Next(); ok; ev, ok = st.Next() {
				out = append(out, ev)
			}
		}
		return out
	}
	ea, eb := draw(a), draw(b)
	if len(ea) == 0 || !reflect.DeepEqual(ea, eb) {
		t.Fatalf("publication streams differ or are empty (%d, %d)", len(ea), len(eb))
	}
	// A different seed draws differently.
	c, _ := Parse("a.toml", []byte(strings.Replace(goodBase, "seed = 3", "seed = 4", 1)))
	if reflect.DeepEqual(draw(c), ea) {
		t.Fatal("seed 4 draws the same publications as seed 3")
	}
	// Rate × window publications per publisher.
	for _, pb := range a.Publishers {
		if n := pb.Count(); n < 89 || n > 90 {
			t.Fatalf("publisher %s: %d publications in 9s at 10/s", pb.Name, n)
		}
	}
}

func TestGenerators(t *testing.T) {
	rng := streamRNG(1, "t")
	g, err := parseGen("zipf(A,B,C,D)")
	if err != nil {
		t.Fatal(err)
	}
	in := g.instance(rng)
	count := map[string]int{}
	for i := 0; i < 20000; i++ {
		count[in.next().Str]++
	}
	// 1/k weights: A ≈ 48%, D ≈ 12%.
	if !(count["A"] > count["B"] && count["B"] > count["C"] && count["C"] > count["D"] && count["D"] > 1500) {
		t.Fatalf("zipf counts %v (seed 1)", count)
	}
	s, _ := parseGen("seq()")
	si := s.instance(rng)
	for i := int64(1); i <= 3; i++ {
		if v := si.next(); v.Int != i {
			t.Fatalf("seq %d gave %v", i, v)
		}
	}
	u, _ := parseGen("uniform(5,6)")
	ui := u.instance(rng)
	for i := 0; i < 1000; i++ {
		if v := ui.next(); v.Float < 5 || v.Float > 6 {
			t.Fatalf("uniform(5,6) gave %v", v.Float)
		}
	}
	r, _ := parseGen("randint(1,3)")
	ri := r.instance(rng)
	seen := map[int64]bool{}
	for i := 0; i < 1000; i++ {
		seen[ri.next().Int] = true
	}
	if len(seen) != 3 || !seen[1] || !seen[3] {
		t.Fatalf("randint(1,3) values %v", seen)
	}
	for _, c := range []struct{ in, out string }{{"'STOCK'", "'STOCK'"}, {"IBM", "'IBM'"}, {"12", "12"}, {"12.5", "12.5"}} {
		g, err := parseGen(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := formatValue(g.instance(rng).next()); got != c.out {
			t.Errorf("constant %s formats as %s, want %s", c.in, got, c.out)
		}
	}
	tpl, err := parseFilterTemplate("[n,=,{seq()}],[s,eq,{'x'}]")
	if err != nil {
		t.Fatal(err)
	}
	gens := tpl.instances(rng)
	if a, b := tpl.expand(gens), tpl.expand(gens); a != "[n,=,1],[s,eq,'x']" || b != "[n,=,2],[s,eq,'x']" {
		t.Fatalf("template expands to %q, %q", a, b)
	}
}

func TestCheckLaunchesNothingForMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "missing.toml"))
	if err == nil || !strings.Contains(err.Error(), "testbed:") {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := os.Stat("examples/quickstart.toml"); err != nil {
		t.Fatal(err)
	}
}
