package talosrecord

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	configdoc "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// InstallDisk is the disk the machine config installs Talos to: the VM's one virtio disk.
const InstallDisk = "/dev/vda"

// Params are what the machine configs name.
type Params struct {
	// Version is the Talos version installed.
	Version string
	// Schematic is the schematic ID whose installer is installed.
	Schematic string
	// Registry is the factory's registry as the machine reaches it (host:port), plain
	// HTTP.
	Registry string
	// Sink is the event sink as the machine reaches it (host:port).
	Sink string
}

// Configs are the documents the probes apply, and the client certificate the installed
// machine takes.
type Configs struct {
	// Machine is a control plane's machine config, made with Talos' machinery: install to
	// InstallDisk from the factory's installer of the schematic, the factory's registry
	// mirrored over plain HTTP, no time sync (the lab has no NTP), 127.0.0.1 among the
	// API certificate's names (the recorder reaches the API through a forwarded port),
	// and an EventSinkConfig naming the sink, so that the installed Talos sends its
	// events there too. A control plane's, as its config carries the machine CA's key:
	// a worker gets its API certificate from a control plane's trustd, which the lab has
	// not.
	Machine []byte
	// NoInstallDisk is Machine without its install disk: invalid in maintenance.
	NoInstallDisk []byte
	// EventSink is an EventSinkConfig alone, the kind of document Omni applies in
	// maintenance (Omni's maintenance config: SideroLink, event sink, kernel log).
	EventSink []byte
	// ClientTLS is the cluster's admin client TLS for the installed machine's API.
	ClientTLS *tls.Config
}

// MakeConfigs makes the configs for p with fresh secrets.
func MakeConfigs(p Params) (*Configs, error) {
	contract, err := talosconfig.ParseContractFromVersion(p.Version)
	if err != nil {
		return nil, fmt.Errorf("error reading the version contract of %s: %w", p.Version, err)
	}

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	if err != nil {
		return nil, fmt.Errorf("error making the cluster's secrets: %w", err)
	}

	in, err := generate.NewInput("talos-record", "https://127.0.0.1:6443", constants.DefaultKubernetesVersion,
		generate.WithVersionContract(contract),
		generate.WithSecretsBundle(bundle),
		generate.WithInstallDisk(InstallDisk),
		generate.WithInstallImage(fmt.Sprintf("%s/metal-installer/%s:%s", p.Registry, p.Schematic, p.Version)),
		generate.WithRegistryMirror(p.Registry, "http://"+p.Registry),
		generate.WithAdditionalSubjectAltNames([]string{"127.0.0.1"}),
	)
	if err != nil {
		return nil, fmt.Errorf("error making the config generator's input: %w", err)
	}

	cp, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		return nil, fmt.Errorf("error generating the machine config: %w", err)
	}

	sink := runtime.NewEventSinkV1Alpha1()
	sink.Endpoint = p.Sink

	noTime := func(c *v1alpha1.Config) error {
		disabled := true
		c.MachineConfig.MachineTime = &v1alpha1.TimeConfig{TimeDisabled: &disabled} //nolint:staticcheck // Talos v1.13 still takes machine.time, as the lab's other configs

		return nil
	}

	full, err := patch(cp, sink, noTime)
	if err != nil {
		return nil, err
	}

	noDisk, err := patch(cp, sink, noTime, func(c *v1alpha1.Config) error {
		c.MachineConfig.MachineInstall.InstallDisk = ""

		return nil
	})
	if err != nil {
		return nil, err
	}

	sinkOnly, err := encode(sink)
	if err != nil {
		return nil, err
	}

	clientTLS, err := adminTLS(bundle)
	if err != nil {
		return nil, err
	}

	return &Configs{Machine: full, NoInstallDisk: noDisk, EventSink: sinkOnly, ClientTLS: clientTLS}, nil
}

// patch encodes cfg's documents patched, and the sink.
func patch(cfg talosconfig.Provider, sink *runtime.EventSinkV1Alpha1, patches ...func(*v1alpha1.Config) error) ([]byte, error) {
	patched, err := cfg.PatchV1Alpha1(func(c *v1alpha1.Config) error {
		for _, p := range patches {
			if err := p(c); err != nil {
				return err
			}
		}

		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("error patching the machine config: %w", err)
	}

	return encode(append(patched.Documents(), sink)...)
}

func encode(docs ...configdoc.Document) ([]byte, error) {
	c, err := container.New(docs...)
	if err != nil {
		return nil, fmt.Errorf("error assembling the config: %w", err)
	}

	b, err := c.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, fmt.Errorf("error encoding the config: %w", err)
	}

	return b, nil
}

// adminTLS is an admin's client TLS for the cluster of bundle: its client certificate,
// and the machine CA as the only root.
func adminTLS(bundle *secrets.Bundle) (*tls.Config, error) {
	admin, err := bundle.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	if err != nil {
		return nil, fmt.Errorf("error making the admin client certificate: %w", err)
	}

	pair, err := tls.X509KeyPair(admin.Crt, admin.Key)
	if err != nil {
		return nil, fmt.Errorf("error reading the admin client certificate: %w", err)
	}

	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle.Certs.OS.Crt) {
		return nil, errors.New("the machine CA's certificate does not parse")
	}

	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS13}, nil
}
