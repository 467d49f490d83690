// netns mode: every host of the file is a Linux network namespace on this
// machine with one TUN interface; the testbed holds the other end of every
// TUN and forwards the packets between them, each host pair's link shaped
// as [network] says (netswitch.go). Brokers run as processes in their
// host's namespace; the clients stay in the testbed, on a TUN of its own,
// and reach every host unshaped.
//
// The links are emulated in the testbed rather than with tc netem so that
// a kernel without netem (CONFIG_NET_SCH_NETEM unset, as on this project's
// CI machine) runs them too, and so that every packet's fate is the
// testbed's to decide (partitions, loss, rate) the same way everywhere.

package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// nsPrefix starts the name of everything a netns run makes (namespaces
// dptb-PID-HOST, the testbed's TUN dptbPID), so that what a crashed run
// left behind is found and removed by the next one.
const nsPrefix = "dptb"

// nsSubnet is the /16 the emulated hosts' /24 is taken from.
const nsSubnet = "10.213."

// Network is one emulated network: a namespace and a TUN per host, and the
// switch between them.
type Network struct {
	pid   int
	tun   string // the testbed's own TUN
	third int    // 10.213.<third>.0/24
	hosts []string
	ns    map[string]string
	idx   map[string]int
	sw    *netSwitch
}

// NeedRoot is the error of a netns run without root.
var NeedRoot = errors.New("testbed: netns mode needs root (it makes network namespaces and TUN interfaces): run as root, or use mode process")

// NewNetwork makes the namespaces and the switch for hosts; shape gives
// each pair's link. Leftovers of dead runs are removed first. On error
// everything made so far is removed.
func NewNetwork(hosts []string, shape func(a, b string) LinkShape) (*Network, error) {
	if os.Geteuid() != 0 {
		return nil, NeedRoot
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("testbed: netns mode needs ip (iproute2)")
	}
	if len(hosts) == 0 || len(hosts) > maxHosts {
		return nil, fmt.Errorf("testbed: netns mode: 1..%d hosts, got %d", maxHosts, len(hosts))
	}
	CleanLeftovers()
	n := &Network{pid: os.Getpid(), hosts: hosts, ns: map[string]string{}, idx: map[string]int{}}
	n.tun = fmt.Sprintf("%s%d", nsPrefix, n.pid)
	third, err := freeThird()
	if err != nil {
		return nil, err
	}
	n.third = third
	if err := n.build(shape); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// freeThird picks a 10.213.X.0/24 no interface of this machine is on.
func freeThird() (int, error) {
	used := map[int]bool{}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if v4 := ipn.IP.To4(); v4 != nil && v4[0] == 10 && v4[1] == 213 {
				used[int(v4[2])] = true
			}
		}
	}
	for x := 1; x < 255; x++ {
		if !used[x] {
			return x, nil
		}
	}
	return 0, errors.New("testbed: netns mode: every 10.213.X.0/24 is in use")
}

// sh runs one ip command.
func sh(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NS is host's namespace name; IP its address; BridgeIP the testbed's
// address on the emulated network.
func (n *Network) NS(host string) string { return n.ns[host] }
func (n *Network) IP(host string) string {
	return fmt.Sprintf("%s%d.%d", nsSubnet, n.third, n.idx[host]+1)
}
func (n *Network) BridgeIP() string { return fmt.Sprintf("%s%d.254", nsSubnet, n.third) }

func (n *Network) build(shape func(a, b string) LinkShape) error {
	n.sw = newNetSwitch()
	for i, h := range n.hosts {
		n.idx[h] = i
		n.ns[h] = fmt.Sprintf("%s-%d-%s", nsPrefix, n.pid, h)
	}
	// The testbed's own port: the clients, unshaped to every host.
	f, err := openTUN("", n.tun)
	if err != nil {
		return err
	}
	ctl := n.sw.addPort("", ipv4(n.BridgeIP()), f)
	for _, st := range [][]string{
		{"ip", "addr", "add", n.BridgeIP() + "/24", "dev", n.tun},
		{"ip", "link", "set", n.tun, "up"},
	} {
		if err := sh(st...); err != nil {
			return fmt.Errorf("testbed: netns mode: %v", err)
		}
	}
	ports := make([]*swPort, len(n.hosts))
	for i, h := range n.hosts {
		ns := n.ns[h]
		if err := sh("ip", "netns", "add", ns); err != nil {
			return fmt.Errorf("testbed: netns mode: %v", err)
		}
		f, err := openTUN(ns, "eth0")
		if err != nil {
			return err
		}
		ports[i] = n.sw.addPort(h, ipv4(n.IP(h)), f)
		in := func(a ...string) []string { return append([]string{"ip", "netns", "exec", ns}, a...) }
		for _, st := range [][]string{
			in("ip", "addr", "add", n.IP(h)+"/24", "dev", "eth0"),
			in("ip", "link", "set", "eth0", "up"),
			in("ip", "link", "set", "lo", "up"),
		} {
			if err := sh(st...); err != nil {
				return fmt.Errorf("testbed: netns mode: %v", err)
			}
		}
	}
	for i, a := range n.hosts {
		n.sw.link(ctl, ports[i], LinkShape{})
		n.sw.link(ports[i], ctl, LinkShape{})
		for j, b := range n.hosts {
			if i != j {
				if err := n.sw.link(ports[i], ports[j], shape(a, b)); err != nil {
					return fmt.Errorf("testbed: netns mode: link %s-%s: %v", a, b, err)
				}
			}
		}
	}
	n.sw.start()
	return nil
}

func ipv4(s string) [4]byte {
	var a [4]byte
	copy(a[:], net.ParseIP(s).To4())
	return a
}

// openTUN opens a TUN interface called name in namespace ns ("": this
// one). The thread that enters the namespace is never returned to Go's
// pool: it ends with its goroutine.
func openTUN(ns, name string) (*os.File, error) {
	type res struct {
		f   *os.File
		err error
	}
	c := make(chan res, 1)
	go func() {
		goruntime.LockOSThread() // not unlocked: the thread dies with the goroutine
		if ns != "" {
			nf, err := os.Open("/run/netns/" + ns)
			if err != nil {
				c <- res{nil, err}
				return
			}
			err = unix.Setns(int(nf.Fd()), unix.CLONE_NEWNET)
			nf.Close()
			if err != nil {
				c <- res{nil, fmt.Errorf("setns %s: %v", ns, err)}
				return
			}
		}
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			c <- res{nil, fmt.Errorf("/dev/net/tun: %v", err)}
			return
		}
		ifr, err := unix.NewIfreq(name)
		if err == nil {
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err == nil {
			err = unix.SetNonblock(fd, true) // read through Go's poller: Close ends a blocked read
		}
		if err != nil {
			unix.Close(fd)
			c <- res{nil, fmt.Errorf("TUN %s: %v", name, err)}
			return
		}
		c <- res{os.NewFile(uintptr(fd), "tun:"+ns+"/"+name), nil}
	}()
	r := <-c
	if r.err != nil {
		return nil, fmt.Errorf("testbed: netns mode: %v", r.err)
	}
	return r.f, nil
}

// Partition cuts hosts off from every other host, or with heal joins
// them again (the testbed's own port stays connected to all).
func (n *Network) Partition(hosts []string, heal bool) error {
	in := map[string]bool{}
	for _, h := range hosts {
		if _, ok := n.idx[h]; !ok {
			return fmt.Errorf("unknown host %q", h)
		}
		in[h] = true
	}
	n.sw.partition(in, !heal)
	return nil
}

// Counters is what the switch forwarded and dropped, per reason.
func (n *Network) Counters() SwitchCounters { return n.sw.counters() }

// Close stops the switch (its TUN interfaces go with their last file)
// and removes the namespaces. Processes still in a namespace are not
// killed here: the caller ends what it started first.
func (n *Network) Close() {
	if n.sw != nil {
		n.sw.close()
	}
	for _, h := range n.hosts {
		if ns := n.ns[h]; ns != "" {
			_ = sh("ip", "netns", "del", ns)
		}
	}
}

// CleanLeftovers removes the namespaces of netns runs whose process is
// gone (a testbed that crashed or was killed; its TUN interfaces went with
// it).
func CleanLeftovers() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix+"-") {
			continue
		}
		parts := strings.SplitN(f[0], "-", 3)
		if len(parts) != 3 {
			continue
		}
		if pid, err := strconv.Atoi(parts[1]); err == nil && pid > 0 && syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = sh("ip", "netns", "del", f[0])
		}
	}
}

// netnsBackend runs the brokers of each host in its namespace.
type netnsBackend struct{ o Options }

func init() {
	RegisterBackend(ModeNetns, func(o Options) Backend { return netnsBackend{o} })
}

func (b netnsBackend) Run(ctx context.Context, p *Plan, rec *Recorder) error {
	if len(p.Spec.Hosts) == 0 {
		return errors.New("testbed: netns mode needs [[hosts]] (name = \"h1\", …): each becomes a network namespace")
	}
	for _, h := range p.Spec.Hosts {
		if h.SSH != "" || h.Address != "" {
			return fmt.Errorf("testbed: netns mode: host %s: ssh and address are for process mode (netns assigns the address)", h.Name)
		}
	}
	bin, err := brokerBinary(b.o, p)
	if err != nil {
		return err
	}
	names := make([]string, len(p.Spec.Hosts))
	for i, h := range p.Spec.Hosts {
		names[i] = h.Name
	}
	rec.SetPhase("making the emulated network")
	nw, err := NewNetwork(names, p.Spec.Network.shapeOf)
	if err != nil {
		return err
	}
	defer nw.Close()
	rec.Note(fmt.Sprintf("netns: %d hosts on %s%d.0/24, links: %s", len(names), nsSubnet, nw.third, describeShapes(p.Spec.Network)))
	l := localLauncher{bin: bin, netw: nw,
		prefix: func(name string) []string { return []string{"ip", "netns", "exec", nw.NS(p.Placement[name])} },
		addr:   func(name string) string { return nw.IP(p.Placement[name]) }}
	h, err := newProcHost(p, bin, b.o.Out, l)
	if err != nil {
		return err
	}
	err = runRealtime(ctx, p, rec, h, b.o)
	c := nw.Counters()
	rec.Note(fmt.Sprintf("netns switch: %d packets forwarded, %d lost (loss), %d dropped by partitions, %d at a full link queue, %d unroutable", c.Forwarded, c.Lost, c.Partitioned, c.QueueFull, c.Unroutable))
	return err
}

// describeShapes says what [network] does, for the notes.
func describeShapes(n NetworkSpec) string {
	out := "default " + n.LinkShape.String()
	for _, l := range n.Links {
		out += fmt.Sprintf("; %s-%s %s", l.Between[0], l.Between[1], l.LinkShape.String())
	}
	return out
}

// applyPartition carries out a partition or heal_partition fault.
func applyPartition(h host, a Action) error {
	if ph, ok := h.(*procHost); ok {
		if ll, ok := ph.l.(localLauncher); ok && ll.netw != nil {
			return ll.netw.Partition(a.Hosts, a.Kind == ActHealPartition)
		}
	}
	return fmt.Errorf("%s needs mode netns", a.Kind)
}

// checkMode refuses, before anything starts, what mode cannot run.
func checkMode(p *Plan, mode string) error {
	if p.hasPartition() && mode != ModeNetns {
		return fmt.Errorf("testbed: %s: partition faults need mode netns (the hosts' network is emulated there)", p.Spec.File)
	}
	if mode == ModeNetns && len(p.Spec.Hosts) == 0 {
		return fmt.Errorf("testbed: %s: mode netns needs [[hosts]]", p.Spec.File)
	}
	return nil
}
