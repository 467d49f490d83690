// Hosts in a testbed file: the machines brokers run on ([[hosts]]), where
// each broker is placed, the emulated network of netns mode ([network]) and
// the partition fault.

package testbed

import (
	"fmt"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// HostSpec is one [[hosts]] entry.
type HostSpec struct {
	Name string `toml:"name"`
	// SSH is user@host[:port] (process mode: brokers are started there
	// through the system's ssh); netns mode needs none.
	SSH string `toml:"ssh"`
	// Address is the IP or name the brokers on this host listen on and
	// are reached at (process mode with ssh; netns mode assigns one).
	Address string `toml:"address"`
	// Dir is the working directory on the host (binary, data, default
	// /tmp/deltapub-testbed).
	Dir string `toml:"dir"`
	// Binary is a deltapub binary already on the host; default: this
	// executable is copied into Dir.
	Binary string `toml:"binary"`
}

// NetworkSpec shapes the links between hosts in netns mode with tc netem:
// the defaults below for every pair, Links for given pairs.
type NetworkSpec struct {
	LinkShape
	Links []LinkSpec `toml:"links"`
}

// LinkShape is what netem does to a link, in each direction.
type LinkShape struct {
	Delay  Duration `toml:"delay"`  // one-way delay
	Jitter Duration `toml:"jitter"` // added to the delay, uniformly within ±jitter
	Loss   float64  `toml:"loss"`   // percent of packets dropped, 0..100
	Rate   string   `toml:"rate"`   // bandwidth, tc syntax ("100mbit", "1gbit"); "" unlimited
}

// LinkSpec is one [[network.links]] entry: the shape of the link between
// two hosts, replacing the default.
type LinkSpec struct {
	Between []string `toml:"between"` // two host names
	LinkShape
}

// Hosts and links bounds: a netns run makes an interface per host and a
// netem class per host pair.
const (
	maxHosts    = 64
	maxRate     = 100e9 // bits/s
	defaultDir  = "/tmp/deltapub-testbed"
	hostNameMax = 16
)

var reRate = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)(bit|kbit|mbit|gbit)$`)

// parseRate checks a tc rate ("100mbit") and returns it in bits/s.
func parseRate(s string) (float64, error) {
	m := reRate.FindStringSubmatch(strings.ToLower(s))
	if m == nil {
		return 0, fmt.Errorf("rate %q: want a number and bit, kbit, mbit or gbit (e.g. \"100mbit\")", s)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	v *= map[string]float64{"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m[2]]
	if v < 8e3 || v > maxRate {
		return 0, fmt.Errorf("rate %q: want between 8kbit and 100gbit", s)
	}
	return v, nil
}

// SSHTarget is a parsed user@host[:port].
type SSHTarget struct {
	User, Host string
	Port       int // 0: ssh's default
}

// ParseSSH reads user@host[:port] (host may be [v6]:port).
func ParseSSH(s string) (SSHTarget, error) {
	user, hp, ok := strings.Cut(s, "@")
	if !ok || user == "" || hp == "" || strings.ContainsAny(s, " \t'\"") {
		return SSHTarget{}, fmt.Errorf("ssh = %q: want user@host or user@host:port", s)
	}
	t := SSHTarget{User: user, Host: hp}
	if h, p, err := net.SplitHostPort(hp); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return SSHTarget{}, fmt.Errorf("ssh = %q: bad port %q", s, p)
		}
		t.Host, t.Port = h, n
	}
	if t.Host == "" || strings.HasPrefix(t.Host, "-") {
		return SSHTarget{}, fmt.Errorf("ssh = %q: no host", s)
	}
	return t, nil
}

// placementOnly reports whether [[broker]] tables only place brokers of a
// generated topology (name and host, no join).
func placementOnly(bs []BrokerSpec) bool {
	for _, b := range bs {
		if b.Join != "" || b.Host == "" {
			return false
		}
	}
	return true
}

// planHosts checks [[hosts]] and [network] and places every broker: by its
// [[broker]] host, else round-robin over the hosts in breadth-first order
// (neighbours in the tree land on different hosts).
func planHosts(s *Spec, p *Plan, errs *errList) {
	L := s.lines.line
	if s.Mode != "" && !knownMode(s.Mode) {
		errs.add(L("mode"), "mode = %q: want %s", s.Mode, strings.Join(append(append([]string{}, Modes...), ModeNetns), " | "))
	}
	idx := map[string]int{}
	for i, h := range s.Hosts {
		line := L(fmt.Sprintf("hosts[%d].name", i))
		if line == 0 {
			line = L(fmt.Sprintf("hosts[%d]", i))
		}
		if !validName(h.Name) || len(h.Name) > hostNameMax {
			errs.add(line, "host name %q: 1 to %d letters, digits, '-' and '_'", h.Name, hostNameMax)
			continue
		}
		if j, dup := idx[h.Name]; dup {
			errs.add(line, "host %q defined twice (first as host %d)", h.Name, j+1)
			continue
		}
		idx[h.Name] = i
		if h.SSH != "" {
			if _, err := ParseSSH(h.SSH); err != nil {
				errs.add(L(fmt.Sprintf("hosts[%d].ssh", i)), "host %s: %v", h.Name, err)
			}
			if h.Address == "" {
				errs.add(line, "host %s: address is required with ssh (the address its brokers listen on)", h.Name)
			}
		}
		if strings.ContainsAny(h.Address+h.Dir+h.Binary, " \t'\"`$\\;&|<>") {
			errs.add(line, "host %s: address, dir and binary must not contain spaces, quotes or shell characters", h.Name)
		}
		for _, k := range []struct{ key, v string }{{"dir", h.Dir}, {"binary", h.Binary}} {
			if k.v != "" && !strings.HasPrefix(k.v, "/") {
				errs.add(L(fmt.Sprintf("hosts[%d].%s", i, k.key)), "host %s: %s = %q must be an absolute path", h.Name, k.key, k.v)
			}
		}
	}
	if len(s.Hosts) > maxHosts {
		errs.add(L("hosts"), "%d hosts: at most %d", len(s.Hosts), maxHosts)
	}
	checkShape := func(key string, sh LinkShape) {
		if sh.Delay.Duration < 0 || sh.Delay.Duration > 10*time.Second || sh.Jitter.Duration < 0 || sh.Jitter.Duration > sh.Delay.Duration && sh.Jitter.Duration > 0 {
			errs.add(L(key), "delay %v, jitter %v: want 0 ≤ jitter ≤ delay ≤ 10s", sh.Delay.Duration, sh.Jitter.Duration)
		}
		if sh.Loss < 0 || sh.Loss > 100 {
			errs.add(L(key), "loss = %v: a percentage within 0..100", sh.Loss)
		}
		if sh.Rate != "" {
			if _, err := parseRate(sh.Rate); err != nil {
				errs.add(L(key), "%v", err)
			}
		}
	}
	checkShape("network", s.Network.LinkShape)
	seen := map[[2]string]bool{}
	for i, l := range s.Network.Links {
		key := fmt.Sprintf("network.links[%d]", i)
		checkShape(key, l.LinkShape)
		if len(l.Between) != 2 || l.Between[0] == l.Between[1] {
			errs.add(L(key), "between = %v: want two different hosts", l.Between)
			continue
		}
		bad := false
		for _, n := range l.Between {
			if _, ok := idx[n]; !ok {
				errs.add(L(key), "unknown host %q in between", n)
				bad = true
			}
		}
		k := pairOf(l.Between[0], l.Between[1])
		if !bad && seen[k] {
			errs.add(L(key), "the link %s-%s is shaped twice", k[0], k[1])
		}
		seen[k] = true
	}
	if (len(s.Network.Links) > 0 || s.Network.LinkShape != (LinkShape{})) && len(s.Hosts) < 2 {
		errs.add(L("network"), "[network] shapes links between hosts: give at least two [[hosts]]")
	}
	// Placement.
	fixed := map[string]string{}
	for i, b := range s.Brokers {
		if b.Host == "" {
			continue
		}
		line := L(fmt.Sprintf("broker[%d].host", i))
		if _, ok := idx[b.Host]; !ok {
			errs.add(line, "broker %s: unknown host %q (have %d [[hosts]])", b.Name, b.Host, len(s.Hosts))
			continue
		}
		if !p.Topo.Has(b.Name) {
			errs.add(line, "unknown broker %q placed on %s", b.Name, b.Host)
			continue
		}
		fixed[b.Name] = b.Host
	}
	if len(s.Hosts) == 0 {
		return
	}
	p.Placement = map[string]string{}
	k := 0
	for _, n := range p.Topo.Names {
		if h, ok := fixed[n]; ok {
			p.Placement[n] = h
			continue
		}
		p.Placement[n] = s.Hosts[k%len(s.Hosts)].Name
		k++
	}
}

// Action kinds of the partition fault.
const (
	ActPartition     = "partition"
	ActHealPartition = "heal_partition"
)

// partitionActions adds a fault's partition and heal_partition: one action
// each, with the hosts and the brokers placed on them.
func partitionActions(p *Plan, f *Fault, fs FaultSpec, key func(string) int, errs *errList) {
	for _, kind := range []string{ActPartition, ActHealPartition} {
		hosts := fs.Partition
		if kind == ActHealPartition {
			hosts = fs.HealPartition
		}
		if len(hosts) == 0 {
			continue
		}
		if p.Placement == nil {
			errs.add(key(kind), "%s needs [[hosts]]", kind)
			continue
		}
		known := map[string]bool{}
		for _, h := range p.Spec.Hosts {
			known[h.Name] = true
		}
		set := map[string]bool{}
		ok := true
		for _, h := range hosts {
			if !known[h] || set[h] {
				errs.add(key(kind), "%s: unknown or repeated host %q", kind, h)
				ok = false
			}
			set[h] = true
		}
		if ok && len(set) == len(known) {
			errs.add(key(kind), "%s of every host: nothing is left on the other side", kind)
			ok = false
		}
		if !ok {
			continue
		}
		a := Action{Kind: kind, Hosts: append([]string(nil), hosts...), Line: key(kind)}
		sort.Strings(a.Hosts)
		for _, n := range p.Topo.Names {
			if set[p.Placement[n]] {
				a.Members = append(a.Members, n)
			}
		}
		f.Actions = append(f.Actions, a)
	}
}

// checkPartitions replays the partitions: one at a time, healed with the
// same hosts.
func checkPartitions(p *Plan, errs *errList) {
	var cur []string
	for _, f := range p.Faults {
		for _, a := range f.Actions {
			switch a.Kind {
			case ActPartition:
				if cur != nil {
					errs.add(a.Line, "partition at %v: %s are still partitioned (heal_partition first)", f.At, strings.Join(cur, ","))
				}
				cur = a.Hosts
			case ActHealPartition:
				if strings.Join(cur, ",") != strings.Join(a.Hosts, ",") {
					errs.add(a.Line, "heal_partition %s at %v: the partition is %q", strings.Join(a.Hosts, ","), f.At, strings.Join(cur, ","))
				}
				cur = nil
			}
		}
	}
}

// ModeNetns runs every host as a network namespace on this machine.
const ModeNetns = "netns"

func knownMode(m string) bool {
	if m == ModeNetns {
		return true
	}
	for _, x := range Modes {
		if x == m {
			return true
		}
	}
	return false
}

// hostOf is the spec of host name.
func (s *Spec) hostOf(name string) HostSpec {
	for _, h := range s.Hosts {
		if h.Name == name {
			return h
		}
	}
	return HostSpec{}
}

// shapeOf is the shape of the link a–b: its [[network.links]] entry, else
// the default.
func (n NetworkSpec) shapeOf(a, b string) LinkShape {
	k := pairOf(a, b)
	for _, l := range n.Links {
		if len(l.Between) == 2 && pairOf(l.Between[0], l.Between[1]) == k {
			return l.LinkShape
		}
	}
	return n.LinkShape
}

// hasPartition reports whether the plan partitions hosts.
func (p *Plan) hasPartition() bool {
	for _, f := range p.Faults {
		for _, a := range f.Actions {
			if a.Kind == ActPartition {
				return true
			}
		}
	}
	return false
}

// describeHosts lists each host and the brokers placed on it ("" without
// [[hosts]]).
func (p *Plan) describeHosts() string {
	if p.Placement == nil {
		return ""
	}
	var b strings.Builder
	for _, h := range p.Spec.Hosts {
		var on []string
		for _, n := range p.Topo.Names {
			if p.Placement[n] == h.Name {
				on = append(on, n)
			}
		}
		where := h.SSH
		if where == "" {
			where = "netns"
		}
		fmt.Fprintf(&b, "\n  host %s (%s): %s", h.Name, where, strings.Join(on, " "))
	}
	return b.String()
}
