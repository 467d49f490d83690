package testbed

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The baseline's example in sim mode: one replica of two adjacent virtual
// nodes crashed and restarted, every receiver getting each publication
// from two replicas: PASS only if nothing is lost, duplicated or
// reordered.
func TestReplicasExampleSim(t *testing.T) {
	p, err := Load("examples/replicas.toml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Layout == nil || len(p.Topo.Names) != 20 || !p.Topo.Has("B2a") || p.Topo.Has("B2") {
		t.Fatalf("layout: %v", p.Topo.Names)
	}
	for _, pb := range p.Publishers {
		if pb.Broker != "B1a" && pb.Broker != "B1b" {
			t.Errorf("publisher %s on %s, want a replica of B1", pb.Name, pb.Broker)
		}
	}
	dir := t.TempDir()
	sum, err := Run(context.Background(), p, "sim", dir, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := sum.Verdict
	if v.Verdict != "PASS" || v.ExpectedDeliveries == 0 || v.Duplicates != 0 || sum.Replicas != 2 {
		t.Fatalf("%s", FormatSummary(sum, dir))
	}
	// The load of B2a (crashed at 10 s) against its sibling B2b, which
	// carries on: B2a processes nothing after.
	png := filepath.Join(t.TempDir(), "load.png")
	c := LoadComparison{Dirs: [2]string{dir, dir}, Labels: [2]string{"a", "b"}, Brokers: [2]string{"B2b", "B2a"},
		Before: [2]time.Duration{4 * time.Second, 10 * time.Second}, After: [2]time.Duration{12 * time.Second, 20 * time.Second}, Plot: png}
	out, err := c.Run()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "ratio B2b cpu (a/b): +Inf") || !strings.Contains(out, "| msgs in+out/s after |") {
		t.Errorf("comparison:\n%s", out)
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
	c.After = [2]time.Duration{40 * time.Second, 50 * time.Second}
	if _, err := c.Run(); err == nil || !strings.Contains(err.Error(), "no samples of B2b") {
		t.Errorf("a window past the run: %v", err)
	}
}

func TestReplicasPlanErrors(t *testing.T) {
	b, err := os.ReadFile("examples/replicas.toml")
	if err != nil {
		t.Fatal(err)
	}
	base := string(b)
	for _, c := range []struct{ old, new, want string }{
		{`mode = "replicas"`, `mode = "mirror"`, `mode = "mirror": want "delta" (default) or "replicas"`},
		{`replicas = 2`, `replicas = 1`, "replicas = 1: want 2..8"},
		{`mode = "replicas"`, `mode = "delta"`, `replicas = 2 is for mode = "replicas"`},
		{`crash = ["B2a", "B5b"]`, `crash = ["B2a", "B2b"]`, "every replica of virtual node B2 would be down (B2a, B2b)"},
		{`crash = ["B2a", "B5b"]`, `crash = ["B2a", "B5b"]` + "\nfreeze = [\"B3a\"]", "freeze B3a at 10s: mode \"replicas\" models crashes and restarts only"},
		{`crash = ["B2a", "B5b"]`, `crash = ["B2", "B5b"]`, `unknown broker "B2"`},
		{`replicas = 2`, "replicas = 2\ndurability = \"fsync\"", `durability = "fsync": mode = "replicas" keeps no publication log`},
		{`brokers = "leaves"`, "brokers = \"leaves\"\ndurable = true", `durable subscribers are not supported in [overlay] mode = "replicas"`},
	} {
		src := strings.Replace(base, c.old, c.new, 1)
		_, err := Parse("replicas.toml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s → %s: %v, want %q", c.old, c.new, err, c.want)
		}
	}
}

// The baseline driven by the runtime, brokers in this process on the
// in-memory transport: one transit replica crashes and restarts (it
// learns that it restarted from the place in its data directory and asks
// its sibling for the routing table). The oracle judges it under k − 1
// crashed replicas per virtual node: PASS.
func TestReplicasInproc(t *testing.T) {
	t.Parallel()
	p, sum, dir := runInproc(t, "examples/replicas-ci.toml", TransportMemory, "")
	checkReplicasCI(t, p, sum, dir)
}

// The same with every replica a `deltapub broker --overlay-mode replicas`
// process on 127.0.0.1.
func TestReplicasProcess(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	p, sum, dir := runExample(t, "examples/replicas-ci.toml", "process", Options{Binary: bin})
	checkReplicasCI(t, p, sum, dir)
}

func checkReplicasCI(t *testing.T, p *Plan, sum *Summary, dir string) {
	t.Helper()
	v := sum.Verdict
	if v.Verdict != "PASS" || v.ExpectedDeliveries == 0 || v.Duplicates != 0 || sum.Replicas != 2 {
		t.Fatalf("seed %d: %s\n%s", p.Spec.Seed, FormatSummary(sum, dir), logs(dir))
	}
	if len(sum.Faults) != 2 || sum.Faults[0].Err != "" || sum.Faults[1].Err != "" {
		t.Errorf("faults not applied cleanly: %+v", sum.Faults)
	}
}

// The Kubernetes manifests of a replicas experiment start every replica
// with the layout and no joinpoints.
func TestReplicasManifests(t *testing.T) {
	p, err := Load("examples/replicas-ci.toml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Manifests(p, ManifestOptions{Image: "example.org/deltapub:1"})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{"--overlay-mode", "--replica-tree", "B2:B1", "--replica-peers", "B4b@"} {
		if !strings.Contains(s, want) {
			t.Errorf("manifests lack %q", want)
		}
	}
	if strings.Contains(s, "--join") {
		t.Error("manifests give replicas joinpoints")
	}
}
