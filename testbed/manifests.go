// Kubernetes manifests of a testbed file (`deltapub testbed manifests`):
// the brokers as a StatefulSet behind a headless Service (pod i is broker
// i of the breadth-first order, so a joinpoint is always started and ready
// before the brokers that join through it), the clients as indexed Jobs,
// and a ConfigMap with each pod's command line.

package testbed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ManifestOptions are the cluster's side of the manifests.
type ManifestOptions struct {
	Image     string // container image with deltapub on its PATH and a POSIX sh
	Namespace string // the Kubernetes namespace (DNS names depend on it)
	QUICPort  int    // UDP port of every broker (default 7000)
	AdminPort int    // TCP port of every broker's admin endpoint (default 7001)
}

// k8s object helpers: plain maps, written as JSON (which kubectl reads as
// it reads YAML).
type obj = map[string]any

// kubeName makes s a DNS-1123 label part (lower case, digits, '-').
func kubeName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		out = "testbed"
	}
	if len(out) > 40 {
		out = strings.TrimRight(out[:40], "-")
	}
	return out
}

// maxManifestPods bounds the pods the manifests ask for.
const maxManifestPods = 20000

// Manifests writes p as a kind: List of Kubernetes objects. The faults of
// the file are not part of it (kubectl delete pod is a crash and restart;
// the testbed's oracle does not run on a cluster): they are listed in an
// annotation for the one who runs it.
func Manifests(p *Plan, o ManifestOptions) ([]byte, error) {
	if o.Image == "" {
		return nil, fmt.Errorf("testbed: manifests: an image is needed (--image)")
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.QUICPort == 0 {
		o.QUICPort = 7000
	}
	if o.AdminPort == 0 {
		o.AdminPort = 7001
	}
	if o.QUICPort == o.AdminPort || o.QUICPort < 1 || o.QUICPort > 65535 || o.AdminPort < 1 || o.AdminPort > 65535 {
		return nil, fmt.Errorf("testbed: manifests: ports %d and %d: two different ports in 1..65535", o.QUICPort, o.AdminPort)
	}
	name := kubeName(p.Spec.Name)
	sts, svc, cm := name+"-broker", name+"-brokers", name+"-testbed"
	labels := func(role string) obj {
		return obj{"app.kubernetes.io/name": "deltapub", "app.kubernetes.io/instance": name, "deltapub.io/role": role}
	}
	ordinal := map[string]int{}
	for i, n := range p.Topo.Names {
		ordinal[n] = i
	}
	dns := func(b string) string {
		return fmt.Sprintf("%s-%d.%s.%s.svc.cluster.local:%d", sts, ordinal[b], svc, o.Namespace, o.QUICPort)
	}
	data := obj{}
	ov := p.Spec.Overlay
	for i, n := range p.Topo.Names {
		args := []string{"--preset", "testbed", "--id", n,
			"--listen", "0.0.0.0:" + strconv.Itoa(o.QUICPort), "--advertise", dns(n),
			"--admin", "0.0.0.0:" + strconv.Itoa(o.AdminPort),
			"--delta", strconv.Itoa(ov.Delta), "--tick", ov.Tick.Duration.String(),
			"--heartbeat", ov.Heartbeat.Duration.String(), "--failure-timeout", ov.FailureTimeout.Duration.String(),
			"--dack-period", ov.DACKPeriod.Duration.String(), "--gone-after", ov.GoneAfter.Duration.String(),
			"--max-queue", strconv.Itoa(ov.MaxQueue), "--log-format", "json", "--data-dir", "/data"}
		if ra := p.replicaArgs(dns); ra != nil {
			args = append(args, ra...) // replicas: the layout, no joinpoints
		} else if i > 0 {
			jps := joinpointsFor(p.Topo, n, ov.Delta)
			addrs := make([]string, len(jps))
			for k, j := range jps {
				addrs[k] = j + "@" + dns(j)
			}
			args = append(args, "--join", strings.Join(addrs, ","))
		}
		data["broker-"+strconv.Itoa(i)] = strings.Join(args, "\n") + "\n"
	}
	// One Job index per subscription (deltapub sub takes one filter) and
	// per publisher.
	run := p.Spec.Warmup.Duration + p.Spec.Duration.Duration + p.Spec.Drain.Duration
	nsubs := 0
	for _, sb := range p.Subscribers {
		for _, f := range sb.Filters {
			data["sub-"+strconv.Itoa(nsubs)] = strings.Join([]string{"--broker", dns(sb.Broker), "--timeout", run.String(), f}, "\n") + "\n"
			nsubs++
		}
	}
	for i, pb := range p.Publishers {
		pubs := pb.Count()
		args := []string{"--broker", dns(pb.Broker), "--publisher", pb.Name,
			"--count", strconv.FormatUint(pubs, 10), "--rate", strconv.FormatFloat(pb.Rate, 'f', -1, 64)}
		if pb.Payload > 0 {
			args = append(args, "--payload-size", strconv.Itoa(pb.Payload))
		}
		args = append(args, pb.firstPublication()) // flags first: the positional argument ends them
		data["pub-"+strconv.Itoa(i)] = strings.Join(args, "\n") + "\n"
	}
	if len(p.Topo.Names)+nsubs+len(p.Publishers) > maxManifestPods {
		return nil, fmt.Errorf("testbed: manifests: %d pods, at most %d", len(p.Topo.Names)+nsubs+len(p.Publishers), maxManifestPods)
	}
	// argsFrom reads one argument per line of a ConfigMap file, so that
	// filters keep their spaces and quotes.
	argsFrom := func(file, cmd string) string {
		return `set --; while IFS= read -r a; do set -- "$@" "$a"; done < /etc/deltapub/` + file + `; exec deltapub ` + cmd + ` "$@"`
	}
	volume := []any{obj{"name": "args", "configMap": obj{"name": cm}}}
	mount := []any{obj{"name": "args", "mountPath": "/etc/deltapub", "readOnly": true}}
	var faults []string
	for _, f := range p.Faults {
		faults = append(faults, fmt.Sprintf("at %v: %s", f.At, f))
	}
	items := []any{
		obj{"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj{"name": cm, "namespace": o.Namespace, "labels": labels("config")}, "data": data},
		obj{"apiVersion": "v1", "kind": "Service",
			"metadata": obj{"name": svc, "namespace": o.Namespace, "labels": labels("broker")},
			"spec": obj{"clusterIP": "None", "publishNotReadyAddresses": true, "selector": labels("broker"),
				"ports": []any{
					obj{"name": "quic", "protocol": "UDP", "port": o.QUICPort},
					obj{"name": "admin", "protocol": "TCP", "port": o.AdminPort},
				}}},
		obj{"apiVersion": "apps/v1", "kind": "StatefulSet",
			"metadata": obj{"name": sts, "namespace": o.Namespace, "labels": labels("broker"),
				"annotations": obj{"deltapub.io/brokers": strings.Join(p.Topo.Names, ","), "deltapub.io/faults": strings.Join(faults, "; ")}},
			"spec": obj{"serviceName": svc, "replicas": len(p.Topo.Names), "podManagementPolicy": "OrderedReady",
				"selector": obj{"matchLabels": labels("broker")},
				"template": obj{"metadata": obj{"labels": labels("broker")},
					"spec": obj{"volumes": append(volume, obj{"name": "data", "emptyDir": obj{}}),
						"containers": []any{obj{"name": "broker", "image": o.Image,
							"command": []any{"/bin/sh", "-c", argsFrom(`broker-"${HOSTNAME##*-}"`, "broker")},
							"env":     []any{obj{"name": "GOMAXPROCS", "value": strconv.Itoa(max(p.Spec.Process.GOMAXPROCS, 1))}},
							"ports": []any{
								obj{"name": "quic", "protocol": "UDP", "containerPort": o.QUICPort},
								obj{"name": "admin", "protocol": "TCP", "containerPort": o.AdminPort},
							},
							"readinessProbe": obj{"httpGet": obj{"path": "/healthz", "port": o.AdminPort}, "periodSeconds": 1, "failureThreshold": 3},
							"volumeMounts":   append(mount, obj{"name": "data", "mountPath": "/data"}),
						}}}}}},
	}
	job := func(role, prefix string, n int, cmd string) obj {
		return obj{"apiVersion": "batch/v1", "kind": "Job",
			"metadata": obj{"name": name + "-" + role, "namespace": o.Namespace, "labels": labels(role)},
			"spec": obj{"completionMode": "Indexed", "completions": n, "parallelism": n, "backoffLimit": 0,
				"template": obj{"metadata": obj{"labels": labels(role)},
					"spec": obj{"restartPolicy": "Never", "volumes": volume,
						"containers": []any{obj{"name": role, "image": o.Image,
							"command":      []any{"/bin/sh", "-c", argsFrom(prefix+`"$JOB_COMPLETION_INDEX"`, cmd)},
							"volumeMounts": mount}}}}}}
	}
	if nsubs > 0 {
		items = append(items, job("subscribers", "sub-", nsubs, "sub"))
	}
	if len(p.Publishers) > 0 {
		items = append(items, job("publishers", "pub-", len(p.Publishers), "pub"))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // filters keep their < and >
	enc.SetIndent("", "  ")
	if err := enc.Encode(obj{"apiVersion": "v1", "kind": "List", "items": items}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// firstPublication is the publisher's first publication in PADRES form
// (attributes in the order the testbed sends them, class first): a Job
// publishes it --count times (deltapub pub has no generators, and numbers
// its publications with n itself).
func (pb *Publisher) firstPublication() string {
	ev, ok := pb.Stream().Next()
	if !ok {
		return "[class,'none']"
	}
	var parts []string
	for _, a := range ev.Attrs {
		if a.Name == "n" {
			continue
		}
		parts = append(parts, "["+a.Name+","+a.Value.String()+"]")
	}
	return strings.Join(parts, ",")
}
