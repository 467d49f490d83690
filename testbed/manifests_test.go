package testbed

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestManifests writes the manifests of an example, parses them back and
// checks that names, selectors and joinpoints agree: pod i runs broker i
// of the breadth-first order, joins through its parent's stable DNS name,
// and every joinpoint is a pod started (and ready) before it.
func TestManifests(t *testing.T) {
	p, err := Load("examples/hosts-netns.toml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Manifests(p, ManifestOptions{Image: "example.org/deltapub:1", Namespace: "exp"})
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Kind  string
		Items []json.RawMessage
	}
	if err := json.Unmarshal(out, &list); err != nil || list.Kind != "List" {
		t.Fatalf("not a List: %v", err)
	}
	type meta struct {
		Name, Namespace string
		Labels          map[string]string
	}
	var (
		cm  map[string]string
		svc struct {
			Metadata meta
			Spec     struct {
				ClusterIP string
				Selector  map[string]string
				Ports     []struct {
					Name, Protocol string
					Port           int
				}
			}
		}
		sts struct {
			Metadata meta
			Spec     struct {
				ServiceName         string
				Replicas            int
				PodManagementPolicy string
				Selector            struct{ MatchLabels map[string]string }
				Template            struct{ Metadata meta }
			}
		}
		jobs = map[string]int{}
	)
	for _, raw := range list.Items {
		var head struct {
			Kind     string
			Metadata meta
			Data     map[string]string
			Spec     struct{ Completions int }
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			t.Fatal(err)
		}
		if head.Metadata.Namespace != "exp" {
			t.Errorf("%s %s in namespace %q", head.Kind, head.Metadata.Name, head.Metadata.Namespace)
		}
		switch head.Kind {
		case "ConfigMap":
			cm = head.Data
		case "Service":
			json.Unmarshal(raw, &svc)
		case "StatefulSet":
			json.Unmarshal(raw, &sts)
		case "Job":
			jobs[head.Metadata.Name] = head.Spec.Completions
		default:
			t.Errorf("unexpected kind %s", head.Kind)
		}
	}
	if svc.Spec.ClusterIP != "None" || sts.Spec.ServiceName != svc.Metadata.Name || sts.Spec.Replicas != len(p.Topo.Names) || sts.Spec.PodManagementPolicy != "OrderedReady" {
		t.Fatalf("service %+v, statefulset %+v", svc, sts)
	}
	for k, v := range svc.Spec.Selector {
		if sts.Spec.Template.Metadata.Labels[k] != v || sts.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("selector %s=%s does not select the broker pods", k, v)
		}
	}
	ordinal := map[string]int{}
	for i := 0; i < sts.Spec.Replicas; i++ {
		args := strings.Split(strings.TrimSpace(cm[fmt.Sprintf("broker-%d", i)]), "\n")
		flag := func(name string) string {
			for k := 0; k+1 < len(args); k++ {
				if args[k] == name {
					return args[k+1]
				}
			}
			return ""
		}
		id := flag("--id")
		if id != p.Topo.Names[i] {
			t.Fatalf("pod %d runs %q, want %s", i, id, p.Topo.Names[i])
		}
		ordinal[id] = i
		self := fmt.Sprintf("%s-%d.%s.exp.svc.cluster.local:7000", sts.Metadata.Name, i, svc.Metadata.Name)
		if flag("--advertise") != self {
			t.Errorf("%s advertises %q, want %q", id, flag("--advertise"), self)
		}
		join := flag("--join")
		if i == 0 {
			if join != "" {
				t.Errorf("the root joins %q", join)
			}
			continue
		}
		jps := strings.Split(join, ",")
		if want := p.Topo.Parent[id]; !strings.HasPrefix(jps[0], want+"@") {
			t.Errorf("%s joins first through %q, want its parent %s", id, jps[0], want)
		}
		for _, jp := range jps {
			jid, addr, _ := strings.Cut(jp, "@")
			o, ok := ordinal[jid]
			if !ok {
				t.Errorf("%s joins through %s, not started before it", id, jid)
				continue
			}
			if want := fmt.Sprintf("%s-%d.%s.exp.svc.cluster.local:7000", sts.Metadata.Name, o, svc.Metadata.Name); addr != want {
				t.Errorf("%s: joinpoint %s at %q, want %q", id, jid, addr, want)
			}
		}
	}
	subs := 0
	for _, sb := range p.Subscribers {
		subs += len(sb.Filters)
	}
	if jobs["hosts-netns-subscribers"] != subs || jobs["hosts-netns-publishers"] != len(p.Publishers) {
		t.Errorf("jobs %v, want %d subscriptions and %d publishers", jobs, subs, len(p.Publishers))
	}
	sub0 := strings.Split(cm["sub-0"], "\n")
	if sub0[0] != "--broker" || sub0[4] != p.Subscribers[0].Filters[0] {
		t.Errorf("sub-0 args %q", sub0)
	}
	if _, err := Manifests(p, ManifestOptions{}); err == nil {
		t.Error("no image: no error")
	}
}
