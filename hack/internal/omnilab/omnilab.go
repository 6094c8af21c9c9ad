// Package omnilab runs a real Omni (built from its Go module by "make omni") in the lab:
// as root, in a network namespace of its own joined to the lab bridge at
// labnet.OmniAddr (labnet.UpOmni), in a mount namespace of its own with a tmpfs on /run,
// where it makes its WireGuard socket; with embedded etcd, a TLS certificate from a CA
// made for it (clients trust the CA's file, verification on), a PGP key for its state,
// and an initial service account whose key is written to its directory. Its Talos and
// Kubernetes versions come from the lab's Image Factory stand-in. Clients (omnictl, in
// client.go) and dialers (dial.go) reach it from the lab's namespaces.
package omnilab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labpki"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// Addr is the lab Omni's address on the lab network.
const Addr = labnet.OmniAddr

// readyTimeout bounds Omni's start: it is ready in 1–2 s on an idle host, but the lab
// shares two cores with builds and QEMU machines.
const readyTimeout = 2 * time.Minute

// stopGrace is how long Omni has to stop after SIGTERM (~5 s seen) before SIGKILL.
const stopGrace = 30 * time.Second

// sandbox runs in Omni's new mount namespace (private: nothing mounted in it is seen
// outside) and execs Omni in it with a tmpfs on /run, so that its WireGuard socket
// (/var/run/wireguard/siderolink.sock) is its own and goes with it.
const sandbox = `mount -t tmpfs -o mode=0755,size=16m omni-run /run && exec "$0" "$@"`

// Config of a lab Omni.
type Config struct {
	// Bin is Omni (make omni: _out/bin/omni).
	Bin string
	// Dir is Omni's own directory and working directory: its secrets, its state (etcd,
	// SQLite), the omnictl/ directory it serves downloads from. Stop removes it.
	Dir string
	// Log is where Omni's output goes; it is kept after Stop.
	Log string
	// NetNS is Omni's network namespace, joined to the lab network with Addr
	// (labnet.Net.UpOmni).
	NetNS string
	// FactoryURL is the Image Factory (the lab's stand-in, http://host:port), Registry
	// the container registry (host:port) whose siderolabs/kubelet tags are the
	// Kubernetes versions (the stand-in's too).
	FactoryURL, Registry string
}

// Omni is a lab Omni that was started: what the lab's state file records of it.
type Omni struct {
	PID   int    `json:"pid"`
	Dir   string `json:"dir"`
	Log   string `json:"log"`
	NetNS string `json:"netns"`
}

// Endpoint is Omni's API endpoint, OMNI_ENDPOINT.
func (o *Omni) Endpoint() string {
	return "https://" + net.JoinHostPort(Addr, strconv.Itoa(APIPort))
}

// MachineAPIURL is where machines join (the siderolink.api= kernel argument's URL).
func (o *Omni) MachineAPIURL() string {
	return "grpc://" + net.JoinHostPort(Addr, strconv.Itoa(MachineAPIPort))
}

// CAFile is the CA that issued Omni's TLS certificate: what its clients trust.
func (o *Omni) CAFile() string { return filepath.Join(o.Dir, caFile) }

// AdminKeyFile holds the initial service account's key (role Admin), which Omni writes
// once it has started: OMNI_SERVICE_ACCOUNT_KEY.
func (o *Omni) AdminKeyFile() string { return filepath.Join(o.Dir, adminKeyFile) }

// AdminKey is the initial service account's key.
func (o *Omni) AdminKey() (string, error) {
	b, err := os.ReadFile(o.AdminKeyFile())
	if err != nil {
		return "", fmt.Errorf("error reading Omni's service account key: %w", err)
	}

	return strings.TrimSpace(string(b)), nil
}

// Running reports whether Omni runs.
func (o *Omni) Running() bool { return o != nil && proc.Alive(o.PID) }

// Start prepares Omni's directory (secrets it lacks, the omnictl/ directory), starts Omni
// and waits until its API answers over TLS with its CA verified and its service account
// key is written. A failed start leaves the process, if any, recorded in the returned
// Omni, for Stop.
func Start(ctx context.Context, cfg Config) (*Omni, error) {
	bin, err := filepath.Abs(cfg.Bin)
	if err != nil {
		return nil, fmt.Errorf("error resolving %s: %w", cfg.Bin, err)
	}

	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no Omni binary (make omni builds it; 10-15 min the first time): %w", err)
	}

	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("error resolving %s: %w", cfg.Dir, err)
	}

	o := &Omni{Dir: dir, Log: cfg.Log, NetNS: cfg.NetNS}

	if err := prepare(dir); err != nil {
		return nil, err
	}

	// A key left beside no state is an earlier Omni's, and would be taken for this one's.
	// Beside its state it is this Omni's: Omni restarting on it writes none.
	if !exists(filepath.Join(dir, etcdDir)) {
		if err := os.Remove(o.AdminKeyFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("error removing the old service account key: %w", err)
		}
	}

	argv := append([]string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", sandbox, bin},
		Args(Addr, dir, cfg.FactoryURL, cfg.Registry)...)

	cmd := netns.Command(context.WithoutCancel(ctx), cfg.NetNS, argv[0], argv[1:]...)
	cmd.Dir = dir // where Omni looks for ./omnictl/

	// "ip netns exec", unshare and sh each exec the next: the pid is Omni's.
	if o.PID, err = proc.StartDaemon(cmd, cfg.Log); err != nil {
		return nil, fmt.Errorf("error starting Omni: %w", err)
	}

	if err := o.waitReady(ctx); err != nil {
		return o, err
	}

	return o, nil
}

// prepare creates Omni's directory and what it needs there, keeping the secrets it has:
// its state is encrypted with the PGP key, and clients may hold the CA.
func prepare(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, omnictlDir), 0o755); err != nil {
		return fmt.Errorf("error creating Omni's directory: %w", err)
	}

	if !exists(filepath.Join(dir, caFile)) || !exists(filepath.Join(dir, certFile)) || !exists(filepath.Join(dir, keyFile)) {
		ca, err := labpki.NewCA("Anvil lab Omni CA")
		if err != nil {
			return err
		}

		pair, err := ca.IssueServer(Addr)
		if err != nil {
			return err
		}

		if err := pair.Write(filepath.Join(dir, certFile), filepath.Join(dir, keyFile)); err != nil {
			return err
		}

		if err := os.WriteFile(filepath.Join(dir, caFile), ca.CertPEM, 0o644); err != nil {
			return fmt.Errorf("error writing the lab Omni's CA: %w", err)
		}
	}

	if !exists(filepath.Join(dir, stateKeyFile)) {
		key, err := NewStateKey("Anvil lab Omni", "omni@anvil.invalid")
		if err != nil {
			return err
		}

		if err := os.WriteFile(filepath.Join(dir, stateKeyFile), key, 0o600); err != nil {
			return fmt.Errorf("error writing Omni's state key: %w", err)
		}
	}

	return nil
}

// waitReady waits until Omni's /healthz answers 200 over TLS, verified with the CA, from
// Omni's namespace, and its service account key is written.
func (o *Omni) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()

	client, err := HTTPClient(o.NetNS, o.CAFile())
	if err != nil {
		return err
	}

	defer client.CloseIdleConnections()

	var last error

	for {
		if !proc.Alive(o.PID) {
			return fmt.Errorf("omni exited; see %s", o.Log)
		}

		last = o.healthy(ctx, client)
		if last == nil {
			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("omni was not ready in %s (%w); see %s", readyTimeout, last, o.Log)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (o *Omni) healthy(ctx context.Context, client *http.Client) error {
	if !exists(o.AdminKeyFile()) {
		return errors.New("no service account key yet")
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.Endpoint()+"/healthz", nil)
	if err != nil {
		return fmt.Errorf("error making the health request: %w", err)
	}

	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("error asking Omni's health: %w", err)
	}

	resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("omni's health: %s", resp.Status)
	}

	return nil
}

// Stop stops Omni (Halt) and removes its directory; its log stays. It is safe to call
// again, and on an Omni that did not start.
func (o *Omni) Stop(ctx context.Context) error {
	if o == nil {
		return nil
	}

	if err := o.Halt(ctx); err != nil {
		return err
	}

	if o.Dir != "" {
		if err := os.RemoveAll(o.Dir); err != nil {
			return fmt.Errorf("error removing Omni's directory: %w", err)
		}
	}

	return nil
}

// Halt stops Omni and whatever else still runs in its network namespace, keeping its
// directory: Start on the same directory restarts it with its state, as an Omni restarts
// in production. Its mount namespace and the tmpfs in it go with the last of its
// processes; its network namespace (and with it the TUN and the veth) is the lab
// network's to remove (labnet.Net.Down).
func (o *Omni) Halt(ctx context.Context) error {
	if o == nil {
		return nil
	}

	errs := []error{proc.Stop(ctx, o.PID, stopGrace)}

	pids, err := netns.PIDs(o.NetNS)
	errs = append(errs, err)

	for _, pid := range pids {
		errs = append(errs, proc.Stop(ctx, pid, 5*time.Second))
	}

	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("error stopping Omni: %w", err)
	}

	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)

	return err == nil
}
