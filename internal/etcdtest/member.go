package etcdtest

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// stopGrace is how long a member has to stop after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// member is one etcd process of the cluster: what it is (fixed at Start) and, under the
// cluster's lock, whether it runs.
type member struct {
	name       string
	host       string
	ns         string // its network namespace, "" for the caller's
	clientPort int
	peerPort   int
	dataDir    string
	log        string
	tls        TLSFiles // its server and peer certificate

	id     uint64  // its raft member ID, learned once the cluster is up
	child  process // nil while it does not run
	frozen bool
	runs   int // how many times it was started
}

func memberName(i int) string { return "m" + strconv.Itoa(i) }

func logPath(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("etcd-%d.log", i)) }

func (m *member) clientURL() string {
	return "https://" + net.JoinHostPort(m.host, strconv.Itoa(m.clientPort))
}

func (m *member) peerURL() string {
	return "https://" + net.JoinHostPort(m.host, strconv.Itoa(m.peerPort))
}

// initialCluster is etcd's --initial-cluster: every member's name and peer URL.
func initialCluster(members []*member) string {
	parts := make([]string, 0, len(members))
	for _, m := range members {
		parts = append(parts, m.name+"="+m.peerURL())
	}

	return strings.Join(parts, ",")
}

// args are m's etcd flags; state is "new" for the first start and "existing" for a
// restart (etcd then reads the membership from its data dir).
func (m *member) args(cluster, state string, quota int64) []string {
	args := []string{
		"--name=" + m.name,
		"--data-dir=" + m.dataDir,
		"--listen-client-urls=" + m.clientURL(),
		"--advertise-client-urls=" + m.clientURL(),
		"--listen-peer-urls=" + m.peerURL(),
		"--initial-advertise-peer-urls=" + m.peerURL(),
		"--initial-cluster=" + cluster,
		"--initial-cluster-state=" + state,
		"--initial-cluster-token=etcdtest",
		"--client-cert-auth",
		"--trusted-ca-file=" + m.tls.CA,
		"--cert-file=" + m.tls.Cert,
		"--key-file=" + m.tls.Key,
		"--peer-client-cert-auth",
		"--peer-trusted-ca-file=" + m.tls.CA,
		"--peer-cert-file=" + m.tls.Cert,
		"--peer-key-file=" + m.tls.Key,
		// Fast enough for tests: a leader lost is replaced within about two seconds.
		"--heartbeat-interval=100",
		"--election-timeout=1000",
		"--auto-compaction-mode=revision",
		"--auto-compaction-retention=1000",
	}

	if quota > 0 {
		args = append(args, "--quota-backend-bytes="+strconv.FormatInt(quota, 10))
	}

	return args
}

// process is a running member: a child of this process, or a daemon.
type process interface {
	Pid() int
	Exited() (bool, error)
	Done() <-chan struct{}
	Stop(grace time.Duration)
}

// start runs m's etcd as a child of this process (its own process group, killed should
// this process die), or as a daemon that outlives it (the lab's). A restart keeps the
// earlier runs' logs as <log>.1, <log>.2…
func (m *member) start(binary string, args []string, daemon bool) error {
	if m.runs > 0 {
		err := os.Rename(m.log, m.log+"."+strconv.Itoa(m.runs))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("error keeping the log of %s's earlier run: %w", m.name, err)
		}
	}

	argv := netns.Argv(m.ns, append([]string{binary}, args...)...)

	var (
		child process
		err   error
	)

	if daemon {
		child, err = startDaemon(exec.Command(argv[0], argv[1:]...), m.log)
	} else {
		child, err = proc.Start("etcd "+m.name, exec.Command(argv[0], argv[1:]...), m.log)
	}

	if err != nil {
		return err
	}

	m.child, m.frozen = child, false
	m.runs++

	return nil
}

// signal sends sig to m's process group.
func (m *member) signal(sig syscall.Signal) error {
	if m.child == nil {
		return fmt.Errorf("%s does not run", m.name)
	}

	if err := syscall.Kill(-m.child.Pid(), sig); err != nil {
		return fmt.Errorf("error sending %s to %s: %w", sig, m.name, err)
	}

	return nil
}

// stop ends m: SIGTERM, then SIGKILL after grace (0: SIGKILL at once), and waits until
// it has exited. A frozen member is thawed first, or SIGTERM would wait for nothing.
func (m *member) stop(grace time.Duration) {
	if m.child == nil {
		return
	}

	if grace == 0 {
		_ = m.signal(syscall.SIGKILL) // an exited member is killed already
	} else if m.frozen {
		_ = m.signal(syscall.SIGCONT) // as above
	}

	m.child.Stop(grace)
	m.child, m.frozen = nil, false
}

// daemonProcess is a member started as a daemon: in a session of its own, not killed
// with this process, watched by pid.
type daemonProcess struct {
	pid      int
	done     chan struct{}
	stopOnce sync.Once
}

func startDaemon(cmd *exec.Cmd, log string) (*daemonProcess, error) {
	pid, err := proc.StartDaemon(cmd, log)
	if err != nil {
		return nil, err
	}

	d := &daemonProcess{pid: pid, done: make(chan struct{})}

	go func() {
		defer close(d.done)

		for proc.Alive(pid) {
			time.Sleep(50 * time.Millisecond)
		}
	}()

	return d, nil
}

func (d *daemonProcess) Pid() int              { return d.pid }
func (d *daemonProcess) Done() <-chan struct{} { return d.done }

func (d *daemonProcess) Exited() (bool, error) {
	select {
	case <-d.done:
		return true, nil
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the daemon's session, SIGKILL after grace, and waits until it
// is gone.
func (d *daemonProcess) Stop(grace time.Duration) {
	d.stopOnce.Do(func() {
		syscall.Kill(-d.pid, syscall.SIGTERM) //nolint:errcheck // ESRCH: gone already

		select {
		case <-d.done:
		case <-time.After(grace):
			syscall.Kill(-d.pid, syscall.SIGKILL) //nolint:errcheck // ESRCH: gone meanwhile
			<-d.done
		}
	})
}
