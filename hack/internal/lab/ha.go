package lab

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/omnilab"
	"github.com/anvil-metal/anvil/internal/etcdtest"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// A site of provider replicas (Config.Replicas, lab up --ha): an etcd member and a
// provider replica in each replica's namespace, keepalived moving the site's address
// (labnet.VIP) to a replica that is ready. The lab's other services (factory, power API,
// simulated BMCs, machines) stay in the provider namespace, on the bridge.

// EtcdPrefix is the lab site's prefix in etcd.
const EtcdPrefix = "/anvil/lab"

// Replica is one provider replica of the lab's site.
type Replica struct {
	Name string `json:"name"`
	NS   string `json:"namespace"`
	Addr string `json:"addr"`
	// PID is the provider's, KeepalivedPID keepalived's beside it.
	PID           int `json:"pid"`
	KeepalivedPID int `json:"keepalivedPid"`
	// Command is the replica's command line (run in NS), for starting it again.
	Command []string `json:"command"`
}

// HA says whether the lab runs a site of replicas rather than one provider.
func (s *State) HA() bool { return len(s.Replicas) > 0 }

// ReplicaDir is replica i's directory: its state directory, log and keepalived's files.
func (s *State) ReplicaDir(i int) string { return filepath.Join(s.Dir, "replica-"+strconv.Itoa(i)) }

// ReplicaStateDir is replica i's --state-dir (the provider key, caches, the control socket).
func (s *State) ReplicaStateDir(i int) string { return filepath.Join(s.ReplicaDir(i), "state") }

// ReplicaLog is replica i's provider log.
func (s *State) ReplicaLog(i int) string { return filepath.Join(s.ReplicaDir(i), "provider.log") }

// ReplicaControlSocket is replica i's control API socket.
func (s *State) ReplicaControlSocket(i int) string {
	return filepath.Join(s.ReplicaStateDir(i), "control.sock")
}

// liveControlSocket is the control socket of a running provider: the lab's, or on a site
// the first running replica's (any replica serves the control API); "" when none runs.
func (s *State) liveControlSocket() string {
	if !s.HA() {
		if s.isProvider(s.ProviderPID) {
			return s.ControlSocket()
		}

		return ""
	}

	for i, r := range s.Replicas {
		if proc.Alive(r.PID) {
			return s.ReplicaControlSocket(i)
		}
	}

	return ""
}

// EtcdDir holds the lab's etcd members: their data, logs and certificates.
func (s *State) EtcdDir() string { return filepath.Join(s.Dir, "etcd") }

// Etcd is the lab's etcd cluster as this process started it (nil in a process that
// did not: its members are daemons all the same, which lab down stops).
func (s *State) Etcd() *etcdtest.Cluster { return s.etcd }

// startSite brings up cfg.Replicas replicas, each with an etcd member and keepalived.
func (s *State) startSite(ctx context.Context, cfg Config) error {
	n := cfg.Replicas
	if n < 2 || n > labnet.MaxReplicas {
		return fmt.Errorf("a lab site has 2 to %d replicas, not %d", labnet.MaxReplicas, n)
	}

	hosts := make([]string, n)
	namespaces := make([]string, n)

	for i := range n {
		if err := s.Net().UpReplica(i); err != nil {
			return err
		}

		hosts[i], namespaces[i] = labnet.ReplicaAddr(i), s.Net().ReplicaNS[i]
	}

	if s.etcd == nil {
		if _, err := os.Stat(s.EtcdDir()); err == nil {
			return fmt.Errorf("the lab's etcd in %s was started by another lab command: lab down, then lab up --ha", s.EtcdDir())
		}

		etcd, err := etcdtest.Start(ctx, etcdtest.Config{
			Members: n, Dir: s.EtcdDir(), Namespaces: namespaces, Hosts: hosts, Daemon: true,
			Dialer: s.dialInLab,
		})
		if err != nil {
			return fmt.Errorf("error starting the lab's etcd: %w", err)
		}

		s.etcd = etcd
	}

	if err := s.shareProviderKey(n); err != nil {
		return err
	}

	s.Replicas = make([]Replica, n)

	for i := range n {
		args, err := s.replicaArgs(ctx, cfg, i, n)
		if err != nil {
			return err
		}

		s.Replicas[i] = Replica{Name: "r" + strconv.Itoa(i), NS: namespaces[i], Addr: hosts[i], Command: args}
	}

	for i := range n {
		if err := s.StartReplica(ctx, i); err != nil {
			return err
		}

		if err := s.startKeepalived(cfg, i); err != nil {
			return err
		}
	}

	return s.save()
}

// dialInLab opens a TCP connection from the lab's provider namespace (on the bridge).
func (s *State) dialInLab(ctx context.Context, addr string) (net.Conn, error) {
	return omnilab.Dialer(s.ProviderNS)(ctx, "tcp", addr)
}

// shareProviderKey gives every replica the one provider key, as an operator copies it
// to each host: made once, in the first replica's state directory.
func (s *State) shareProviderKey(n int) error {
	first := filepath.Join(s.ReplicaStateDir(0), "provider.key")

	key, err := os.ReadFile(first)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		if _, err = rand.Read(key); err != nil {
			return fmt.Errorf("error making the provider key: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("error reading the provider key: %w", err)
	}

	for i := range n {
		if err := os.MkdirAll(s.ReplicaStateDir(i), 0o700); err != nil {
			return fmt.Errorf("error creating replica %d's state directory: %w", i, err)
		}

		if err := os.WriteFile(filepath.Join(s.ReplicaStateDir(i), "provider.key"), key, 0o600); err != nil { //nolint:gosec // the lab's own directory
			return fmt.Errorf("error giving replica %d the provider key: %w", i, err)
		}
	}

	return nil
}

// replicaArgs is replica i's command line: the lab's provider flags on the site's state,
// advertising the site's address.
func (s *State) replicaArgs(ctx context.Context, cfg Config, i, n int) ([]string, error) {
	files := s.etcd.TLS()

	endpoints := make([]string, n)
	for j := range n {
		endpoints[j] = "https://" + net.JoinHostPort(labnet.ReplicaAddr(j), "2379")
	}

	args, err := s.providerArgs(cfg, s.ReplicaStateDir(i), labnet.VIP, labnet.ReplicaVeth)
	if err != nil {
		return nil, err
	}

	args = append(args,
		"--state", "etcd", "--etcd-endpoints", strings.Join(endpoints, ","),
		"--etcd-ca", files.CA, "--etcd-cert", files.Cert, "--etcd-key", files.Key,
		"--etcd-prefix", EtcdPrefix, "--replica-name", "r"+strconv.Itoa(i),
	)

	if s.Omni != nil {
		// One infra provider in Omni for the site: the leader speaks for it.
		omniArgs, err := s.omniProviderArgs(ctx, cfg)
		if err != nil {
			return nil, err
		}

		args = append(args, omniArgs...)
	}

	return args, nil
}

// StartReplica starts replica i (again) with its recorded command line and waits until
// it serves its control socket.
func (s *State) StartReplica(ctx context.Context, i int) error {
	r := &s.Replicas[i]
	_ = os.Remove(s.ReplicaControlSocket(i)) // a killed replica's, which would read as ready

	var err error

	cmd := netns.Command(context.WithoutCancel(ctx), r.NS, r.Command[0], r.Command[1:]...)
	if r.PID, err = proc.StartDaemon(cmd, s.ReplicaLog(i)); err != nil {
		return fmt.Errorf("error starting replica %s: %w", r.Name, err)
	}

	if err := s.save(); err != nil {
		return err
	}

	return waitSocket(ctx, r.PID, s.ReplicaControlSocket(i), s.ReplicaLog(i), "replica "+r.Name)
}

// KillReplica kills replica i outright (SIGKILL: as a crash or a host lost).
func (s *State) KillReplica(ctx context.Context, i int) error {
	pid := s.Replicas[i].PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("error killing replica %d: %w", i, err)
	}

	if !proc.WaitGone(ctx, pid, 10*time.Second) {
		return fmt.Errorf("replica %d (pid %d) survived SIGKILL", i, pid)
	}

	return nil
}

// StopReplica stops replica i gracefully (SIGTERM: it resigns leadership).
func (s *State) StopReplica(ctx context.Context, i int) error {
	if err := proc.Stop(ctx, s.Replicas[i].PID, 15*time.Second); err != nil {
		return fmt.Errorf("error stopping replica %d: %w", i, err)
	}

	return nil
}

// keepalivedConf is replica i's keepalived: VRRP by unicast to the other replicas, the
// site's address on the replica's veth while its provider answers /readyz.
func keepalivedConf(i, n, apiPort int) string {
	var peers []string

	for j := range n {
		if j != i {
			peers = append(peers, "    "+labnet.ReplicaAddr(j))
		}
	}

	return fmt.Sprintf(`global_defs {
  router_id anvil-r%d
  script_user root
  enable_script_security
}

vrrp_script provider_ready {
  script "/usr/bin/curl -fsS -m 1 -o /dev/null http://127.0.0.1:%d/readyz"
  interval 1
  timeout 2
  fall 2
  rise 1
}

vrrp_instance anvil {
  state BACKUP
  interface %s
  virtual_router_id 77
  priority %d
  advert_int 1
  unicast_src_ip %s
  unicast_peer {
%s
  }
  virtual_ipaddress {
    %s/24 dev %s
  }
  track_script {
    provider_ready
  }
}
`, i, apiPort, labnet.ReplicaVeth, 150-i, labnet.ReplicaAddr(i), strings.Join(peers, "\n"), labnet.VIP, labnet.ReplicaVeth)
}

// startKeepalived runs keepalived (VRRP only) in replica i's namespace.
func (s *State) startKeepalived(cfg Config, i int) error {
	dir := s.ReplicaDir(i)
	conf := filepath.Join(dir, "keepalived.conf")

	if err := os.WriteFile(conf, []byte(keepalivedConf(i, len(s.Replicas), cfg.APIPort)), 0o644); err != nil {
		return fmt.Errorf("error writing keepalived's configuration: %w", err)
	}

	cmd := netns.Command(context.Background(), s.Replicas[i].NS, "keepalived",
		"--dont-fork", "--log-console", "--vrrp", "--use-file", conf,
		"--pid", filepath.Join(dir, "keepalived.pid"), "--vrrp_pid", filepath.Join(dir, "vrrp.pid"))

	var err error
	if s.Replicas[i].KeepalivedPID, err = proc.StartDaemon(cmd, filepath.Join(dir, "keepalived.log")); err != nil {
		return fmt.Errorf("error starting keepalived for replica %d: %w", i, err)
	}

	return nil
}

// VIPHolder is the replica whose veth holds the site's address, -1 when none does.
func (s *State) VIPHolder() (int, error) {
	for i, r := range s.Replicas {
		l, err := netns.OpenLinks(r.NS)
		if err != nil {
			return -1, err
		}

		addrs, err := l.Addrs(labnet.ReplicaVeth)
		l.Close()

		if err != nil {
			return -1, err
		}

		for _, a := range addrs {
			if a.Addr().String() == labnet.VIP {
				return i, nil
			}
		}
	}

	return -1, nil
}

// VIPHolders are the replicas whose veths hold the site's address: one while the site
// is whole, none while no replica is ready, two should keepalived fail.
func (s *State) VIPHolders() ([]int, error) {
	var holders []int

	for i, r := range s.Replicas {
		l, err := netns.OpenLinks(r.NS)
		if err != nil {
			return nil, err
		}

		addrs, err := l.Addrs(labnet.ReplicaVeth)
		l.Close()

		if err != nil {
			return nil, err
		}

		for _, a := range addrs {
			if a.Addr().String() == labnet.VIP {
				holders = append(holders, i)
			}
		}
	}

	return holders, nil
}

// KillKeepalived kills replica i's keepalived outright (SIGKILL, its VRRP process as
// well), as its host dying would, and takes the site's address off the replica's veth,
// where a killed keepalived leaves it and where a dead host would hold it no more.
func (s *State) KillKeepalived(ctx context.Context, i int) error {
	pids := []int{s.Replicas[i].KeepalivedPID}
	if b, err := os.ReadFile(filepath.Join(s.ReplicaDir(i), "vrrp.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}

	for _, pid := range pids {
		if pid <= 0 {
			continue
		}

		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("error killing replica %d's keepalived: %w", i, err)
		}
	}

	for _, pid := range pids {
		if pid > 0 && !proc.WaitGone(ctx, pid, 10*time.Second) {
			return fmt.Errorf("replica %d's keepalived (pid %d) survived SIGKILL", i, pid)
		}
	}

	out, err := netns.Command(ctx, s.Replicas[i].NS, "ip", "addr", "del", labnet.VIP+"/24", "dev", labnet.ReplicaVeth).CombinedOutput()
	// The address is there only if keepalived made this replica the master.
	if err != nil && !strings.Contains(string(out), "Cannot assign requested address") && !strings.Contains(string(out), "Address not found") {
		return fmt.Errorf("error taking the site's address off replica %d: %w: %s", i, err, out)
	}

	return nil
}

// StartKeepalived starts replica i's keepalived again (after KillKeepalived), checking
// the replica's /readyz on apiPort.
func (s *State) StartKeepalived(i, apiPort int) error {
	if err := s.startKeepalived(Config{APIPort: apiPort}, i); err != nil {
		return err
	}

	return s.save()
}

// stopSite stops the replicas, keepalived and etcd (by pid; the sweep finds the rest).
func (s *State) stopSite(ctx context.Context) []error {
	var errs []error

	for _, r := range s.Replicas {
		errs = append(errs, proc.Stop(ctx, r.KeepalivedPID, 5*time.Second), proc.Stop(ctx, r.PID, 10*time.Second))
	}

	if s.etcd != nil {
		errs = append(errs, s.etcd.Stop())
	}

	return errs
}

// Leader is the replica that says it leads (its anvil_replica_leader metric), -1 when
// no running replica does.
func (s *State) Leader(ctx context.Context, apiPort int) (int, error) {
	client := &http.Client{
		Timeout:   3 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return s.dialInLab(ctx, addr) }},
	}

	for i, r := range s.Replicas {
		if !proc.Alive(r.PID) {
			continue
		}

		url := "http://" + net.JoinHostPort(r.Addr, strconv.Itoa(apiPort)) + "/metrics"

		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return -1, err
		}

		resp, err := client.Do(req)
		if err != nil {
			continue // a replica that does not answer does not lead
		}

		body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()

		if err != nil {
			continue
		}

		for line := range strings.Lines(string(body)) {
			if strings.TrimSpace(line) == "anvil_replica_leader 1" {
				return i, nil
			}
		}
	}

	return -1, nil
}
