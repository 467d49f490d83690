package testbed

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// launcher is where the broker processes of a procHost run: on this
// machine (localLauncher), in network namespaces (netns.go) or on hosts
// reached over ssh (remote.go). procHost does the rest the same way.
type launcher interface {
	// local reports whether brokers run in this machine's own network
	// (ports can be checked free here).
	local() bool
	// ip is the address broker name listens on.
	ip(name string) string
	// dataDir is broker name's data directory where it runs.
	dataDir(name string) string
	// command is the process that runs broker name with args, its output
	// going to out. pid, if not nil, waits for the broker's pid on its
	// host once the process started (done: it exited).
	command(name string, args []string, ps ProcessSpec, out io.Writer) (cmd *exec.Cmd, pid func(done <-chan struct{}) (int, error))
	signal(pr *proc, sig syscall.Signal) error
	// cpu is pr's utime+stime in seconds and RSS in bytes.
	cpu(pr *proc) (float64, int64, error)
	// wipe removes broker name's data directory.
	wipe(name string) error
	// close ends what the launcher holds (connections); after stopAll.
	close()
}

// localLauncher runs brokers on 127.0.0.1 of this machine; prefix, if
// set, is put before the binary (ip netns exec NS), and addr overrides
// the address per broker.
type localLauncher struct {
	bin, data string
	prefix    func(name string) []string
	addr      func(name string) string
	netw      *Network // netns mode: the emulated network (partitions)
}

func (l localLauncher) local() bool { return l.addr == nil }

func (l localLauncher) ip(name string) string {
	if l.addr != nil {
		return l.addr(name)
	}
	return "127.0.0.1"
}

func (l localLauncher) dataDir(name string) string { return filepath.Join(l.data, name) }

func (l localLauncher) command(name string, args []string, ps ProcessSpec, out io.Writer) (*exec.Cmd, func(<-chan struct{}) (int, error)) {
	argv := append([]string{l.bin}, args...)
	if l.prefix != nil {
		argv = append(l.prefix(name), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = brokerEnv(os.Environ(), ps)
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, nil
}

func (l localLauncher) signal(pr *proc, sig syscall.Signal) error { return pr.cmd.Process.Signal(sig) }

func (l localLauncher) cpu(pr *proc) (float64, int64, error) { return procCPU(pr.cmd.Process.Pid) }

func (l localLauncher) wipe(name string) error { return os.RemoveAll(l.dataDir(name)) }

func (l localLauncher) close() {}
