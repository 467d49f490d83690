package testbed

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/matching"
)

// TestProcessDurableSubscriberMoves runs three broker processes, the
// publisher's edge B1 retaining its log. A `deltapub sub --durable` with
// --broker B2,B3 consumes from B2; B2 is killed with SIGKILL and more is
// published; the subscriber moves to B3 by itself and resumes from its
// token. Then it is stopped, more is published, and a new `deltapub sub
// --durable` with the same state file resumes at B3. Every matching
// publication must be printed exactly once, in order, across both.
func TestProcessDurableSubscriberMoves(t *testing.T) {
	pc := newProcCluster(t, []string{"B1", "B2", "B3"}, "--max-retain", "1m")
	pc.start("B1")
	pc.start("B2", "B1")
	pc.start("B3", "B2", "B1")
	state := filepath.Join(pc.dir, "sub.state")
	filter := "[class,eq,'a']"

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var subErr lockedBuffer
	sub := exec.CommandContext(ctx, pc.bin, "sub", "--durable", "d1", "--state", state,
		"--broker", pc.addr["B2"]+","+pc.addr["B3"], filter)
	sub.Stderr = &subErr
	sub.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Process.Kill(); _ = sub.Wait() })
	lines := make(chan deliveryLine, 1024)
	go readDeliveryLines(out, lines)

	publish, wantp := pc.classPublisher(ctx, "B1")
	var got []uint64
	await := func(what string) {
		t.Helper()
		for len(got) < len(*wantp) {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("%s: subscriber's output ended after %v\nstderr: %s\n%s", what, got, subErr.String(), pc.logs())
				}
				if l.Gap != nil {
					t.Fatalf("%s: unexpected gap %+v", what, *l.Gap)
				}
				got = append(got, l.Seq)
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: got %v, want %v\nstderr: %s\n%s", what, got, *wantp, subErr.String(), pc.logs())
			}
		}
		if !slices.Equal(got, *wantp) {
			t.Fatalf("%s: got %v, want %v (exactly once, in order)", what, got, *wantp)
		}
	}
	// The durable subscription is confirmed: nothing published before is owed.
	waitFor(t, 20*time.Second, "the durable subscription confirmed", func() bool { return strings.Contains(subErr.String(), "confirmed") })
	publish(1, 15)
	await("at B2")
	pc.kill("B2")
	publish(16, 30)
	await("moved to B3")
	// Stopped, then resumed by a new process from the state file.
	_ = sub.Process.Signal(syscall.SIGTERM)
	_ = sub.Wait()
	for range lines {
		t.Fatal("a line printed after the last expected one")
	}
	publish(31, 40)
	n := len(*wantp) - len(got)
	again := exec.CommandContext(ctx, pc.bin, "sub", "--durable", "d1", "--state", state, "--broker", pc.addr["B3"],
		"--count", itoa(n), "--timeout", "30s", filter)
	var againErr bytes.Buffer
	again.Stderr = &againErr
	res, err := again.Output()
	if err != nil {
		t.Fatalf("resumed subscriber: %v\nstderr: %s\n%s", err, againErr.String(), pc.logs())
	}
	ch := make(chan deliveryLine, 1024)
	readDeliveryLines(bytes.NewReader(res), ch)
	for l := range ch {
		got = append(got, l.Seq)
	}
	if !slices.Equal(got, *wantp) {
		t.Fatalf("after the resume from the state file: got %v, want %v", got, *wantp)
	}
}

type deliveryLine struct {
	Seq uint64          `json:"seq"`
	Gap *map[string]any `json:"gap"`
}

func readDeliveryLines(r interface{ Read([]byte) (int, error) }, out chan<- deliveryLine) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var l deliveryLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out <- l
		}
	}
	close(out)
}

// classPublisher connects publisher P1 (epoch 7) at broker b. Its
// publish(from, to) publishes n = from..to, class 'b' when n is a multiple
// of 3 and 'a' otherwise, and appends the class 'a' ones to *want.
func (pc *procCluster) classPublisher(ctx context.Context, b string) (publish func(from, to int), want *[]uint64) {
	t := pc.t
	t.Helper()
	pub, err := client.Connect(ctx, pc.addr[b], client.Options{Publisher: "P1", Epoch: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	want = new([]uint64)
	publish = func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			class := "a"
			if i%3 == 0 {
				class = "b"
			} else {
				*want = append(*want, uint64(i))
			}
			attrs := []matching.Attr{{Name: "class", Value: matching.Value{Kind: matching.KindString, Str: class}}, {Name: "n", Value: matching.Value{Kind: matching.KindInt, Int: int64(i)}}}
			if err := pub.Publish(ctx, matching.Publication{Attrs: attrs}); err != nil {
				t.Fatalf("publication %d: %v\n%s", i, err, pc.logs())
			}
		}
	}
	return publish, want
}

// waitFor fails t when cond does not hold within d; detail, if given,
// says what the processes printed.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool, detail ...func() string) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	var b strings.Builder
	for _, f := range detail {
		b.WriteString("\n" + f())
	}
	t.Fatalf("timed out waiting for %s%s", what, b.String())
}

// lockedBuffer is a bytes.Buffer safe for the writer goroutine of
// exec.Cmd and the test reading it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
