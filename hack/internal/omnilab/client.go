package omnilab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/anvil-metal/anvil/internal/netns"
)

// Client runs omnictl (make omni: _out/bin/omnictl) against a lab Omni as its initial
// service account (Admin), from a lab network namespace.
type Client struct {
	// Bin is omnictl.
	Bin string
	// NetNS is where omnictl runs: any lab namespace that reaches Addr (Omni's own, or
	// the provider's, through the bridge).
	NetNS string

	omni *Omni
	// key is the service account key used; empty: the initial (Admin) one.
	key string
}

// Client is a Client of o running bin in network namespace ns.
func (o *Omni) Client(bin, ns string) *Client {
	return &Client{Bin: bin, NetNS: ns, omni: o}
}

// As is c acting as the service account whose key is key (e.g. an infra provider's,
// from CreateInfraProvider), not as the administrator.
func (c *Client) As(key string) *Client {
	as := *c
	as.key = key

	return &as
}

// Env is what omnictl needs, beside its --omniconfig: Omni's endpoint, the service
// account key, and the lab CA as the only trusted root (Go reads SSL_CERT_FILE on Linux,
// so omnictl verifies Omni's certificate without --insecure-skip-tls-verify).
func (c *Client) Env() ([]string, error) {
	key := c.key
	if key == "" {
		var err error

		if key, err = c.omni.AdminKey(); err != nil {
			return nil, err
		}
	}

	return []string{
		"OMNI_ENDPOINT=" + c.omni.Endpoint(),
		"OMNI_SERVICE_ACCOUNT_KEY=" + key,
		"SSL_CERT_FILE=" + c.omni.CAFile(),
	}, nil
}

// Command is omnictl with args, its configuration in Omni's directory (never in $HOME).
func (c *Client) Command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	env, err := c.Env()
	if err != nil {
		return nil, err
	}

	bin, err := filepath.Abs(c.Bin)
	if err != nil {
		return nil, fmt.Errorf("error resolving %s: %w", c.Bin, err)
	}

	cmd := netns.Command(ctx, c.NetNS, bin, append([]string{"--omniconfig", filepath.Join(c.omni.Dir, omniconfigFile)}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second

	return cmd, nil
}

// Run runs omnictl with args and returns its standard output; its standard error is in
// the error.
func (c *Client) Run(ctx context.Context, args ...string) (string, error) {
	cmd, err := c.Command(ctx, args...)
	if err != nil {
		return "", err
	}

	var stdout, stderr bytes.Buffer

	cmd.Stdout, cmd.Stderr = &stdout, &stderr

	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("omnictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}

	return stdout.String(), nil
}

// CreateInfraProvider creates the infra provider id (omnictl infraprovider create) and
// returns its service account's key: the provider's OMNI_SERVICE_ACCOUNT_KEY, beside
// Endpoint and CAFile.
func (c *Client) CreateInfraProvider(ctx context.Context, id string) (string, error) {
	out, err := c.Run(ctx, "infraprovider", "create", id)
	if err != nil {
		return "", err
	}

	return parseServiceAccountKey(out)
}

// parseServiceAccountKey finds the key in what "omnictl infraprovider create" prints:
// OMNI_SERVICE_ACCOUNT_KEY=<key>.
func parseServiceAccountKey(out string) (string, error) {
	const prefix = "OMNI_SERVICE_ACCOUNT_KEY="

	s := bufio.NewScanner(strings.NewReader(out))
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)

	for s.Scan() {
		if key, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), prefix); ok && key != "" {
			return key, nil
		}
	}

	return "", fmt.Errorf("no %s in omnictl's output: %q", strings.TrimSuffix(prefix, "="), out)
}

// ProviderJoinConfig is Omni's siderolink.ProviderJoinConfig of an infra provider: how
// its machines join Omni.
type ProviderJoinConfig struct {
	// KernelArgs are the kernel arguments machines join with (siderolink.api=,
	// talos.events.sink=, talos.logging.kernel=).
	KernelArgs []string
	// Config is the same as Talos machine configuration documents (SideroLinkConfig,
	// EventSinkConfig, KmsgLogConfig).
	Config string
	// JoinToken is the provider's join token.
	JoinToken string
}

// ProviderJoinConfig reads the join configuration Omni makes for infra provider id,
// waiting for Omni to make it (it follows the provider's creation) until ctx ends.
func (c *Client) ProviderJoinConfig(ctx context.Context, id string) (*ProviderJoinConfig, error) {
	for {
		out, err := c.Run(ctx, "get", "providerjoinconfigs", id, "--namespace", "infra-provider", "--output", "yaml")
		if err == nil {
			return parseProviderJoinConfig([]byte(out))
		}

		if !strings.Contains(err.Error(), "NotFound") && !strings.Contains(err.Error(), "doesn't exist") {
			return nil, err
		}

		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no join configuration of infra provider %s: %w (last: %w)", id, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// parseProviderJoinConfig reads "omnictl get providerjoinconfigs <id> -o yaml": the
// spec's fields are named as their protobuf fields without underscores (kernelargs,
// jointoken).
func parseProviderJoinConfig(b []byte) (*ProviderJoinConfig, error) {
	var doc struct {
		Spec struct {
			Config struct {
				KernelArgs []string `yaml:"kernelargs"`
				Config     string   `yaml:"config"`
			} `yaml:"config"`
			JoinToken string `yaml:"jointoken"`
		} `yaml:"spec"`
	}

	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("error decoding the provider join configuration: %w", err)
	}

	if len(doc.Spec.Config.KernelArgs) == 0 {
		return nil, fmt.Errorf("a provider join configuration without kernel arguments: %q", b)
	}

	return &ProviderJoinConfig{KernelArgs: doc.Spec.Config.KernelArgs, Config: doc.Spec.Config.Config, JoinToken: doc.Spec.JoinToken}, nil
}

// SideroLinkAPI is the URL of the siderolink.api= kernel argument, and its join token
// (the jointoken query parameter, "v2:…", which Omni writes URL-escaped: v2%3A…).
func (jc *ProviderJoinConfig) SideroLinkAPI() (*url.URL, string, error) {
	for _, arg := range jc.KernelArgs {
		raw, ok := strings.CutPrefix(arg, "siderolink.api=")
		if !ok {
			continue
		}

		u, err := url.Parse(raw)
		if err != nil {
			return nil, "", fmt.Errorf("error parsing siderolink.api=%s: %w", raw, err)
		}

		return u, u.Query().Get("jointoken"), nil
	}

	return nil, "", fmt.Errorf("no siderolink.api= among %q", jc.KernelArgs)
}

// TalosVersions lists the Talos versions Omni offers clusters (without the leading v).
func (c *Client) TalosVersions(ctx context.Context) ([]string, error) {
	out, err := c.Run(ctx, "get", "talosversions", "--output", "yaml")
	if err != nil {
		return nil, err
	}

	return parseTalosVersions([]byte(out))
}

func parseTalosVersions(b []byte) ([]string, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))

	var versions []string

	for {
		var doc struct {
			Spec struct {
				Version string `yaml:"version"`
			} `yaml:"spec"`
		}

		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return versions, nil
		}

		if err != nil {
			return nil, fmt.Errorf("error decoding Talos versions: %w", err)
		}

		if doc.Spec.Version != "" {
			versions = append(versions, doc.Spec.Version)
		}
	}
}
