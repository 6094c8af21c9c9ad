// Package providerimage builds the provider's OCI image with go-containerregistry, no
// Docker: the static provider and its Omni adapter, the iPXE binaries it serves over TFTP,
// the agent's boot assets, a CA bundle, and a non-root user whose state directory is
// /var/lib/anvil. Reproducible: the same inputs and time give the same digest.
package providerimage

import (
	"context"
	"fmt"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths in the image. The provider's defaults point into the build tree (_out/agent) or
// at the host's packages (/usr/lib/ipxe): the image's Env points them here instead.
const (
	ProviderPath    = "/usr/bin/anvil-provider"
	OmniAdapterPath = "/usr/bin/omni-adapter" // beside the provider, where it looks first
	AgentDir        = "/usr/share/anvil/agent"
	IPXEDir         = "/usr/share/anvil/ipxe"
	CABundlePath    = "/etc/ssl/certs/ca-certificates.crt"
	StateDir        = "/var/lib/anvil"
)

// The user the provider runs as. Numeric in the config, so that Kubernetes can check
// runAsNonRoot without the image's /etc/passwd.
const (
	UID      = 10000
	GID      = 10000
	UserName = "anvil"
)

// Capabilities are what the provider needs as that user, and what the binary carries as
// file capabilities (effective): NET_BIND_SERVICE for DHCP on 67 and TFTP on 69;
// NET_RAW for SO_BINDTODEVICE, which binds the DHCP sockets to their interface (kernels
// before 5.7 ask it of every caller). A container must be granted both, else the kernel
// refuses to run the binary.
var Capabilities = []string{"NET_BIND_SERVICE", "NET_RAW"}

// ExposedPorts are the provider's ports: ProxyDHCP (or full DHCP), TFTP, the PXE boot
// server, the HTTP/gRPC API, the console over HTTPS. The provider needs the host's
// network (DHCP is broadcast): they document more than they map.
var ExposedPorts = []string{"67/udp", "69/udp", "4011/udp", "50042/tcp", "50043/tcp"}

// Source is where the image's code lives (org.opencontainers.image.source).
const Source = "https://github.com/anvil-metal/anvil"

// Options say what the image holds.
type Options struct {
	// Provider and OmniAdapter are the static binaries for Arch (CGO_ENABLED=0).
	Provider    string
	OmniAdapter string
	// AgentAssets is the agent's boot assets: vmlinuz-<arch>, initramfs-<arch>.{zst,xz},
	// cmdline-<arch> (make agent-initramfs).
	AgentAssets string
	// IPXEDir holds IPXEFiles, the iPXE binaries served over TFTP (Debian's ipxe
	// package: /usr/lib/ipxe); symlinks are followed.
	IPXEDir   string
	IPXEFiles []string
	// CABundle is the PEM bundle of trusted CAs (Debian's ca-certificates).
	CABundle string
	// Arch is the image's architecture: amd64 or arm64.
	Arch string
	// Version and Revision label the image (the git description and commit).
	Version  string
	Revision string
	// Created is the image's creation time and every file's mtime: the only time in the
	// image, so that a rebuild is byte-identical.
	Created time.Time
}

// Defaults of Options' inputs, as a Debian host has them.
const (
	DefaultIPXEDir  = "/usr/lib/ipxe"
	DefaultCABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// DefaultIPXEFiles are the provider's BIOS and UEFI defaults (--ipxe-bios-file,
// --ipxe-uefi-file) and snponly.efi, the UEFI alternative it names.
var DefaultIPXEFiles = []string{"undionly.kpxe", "ipxe.efi", "snponly.efi"}

// Env is the image's environment: the provider's flags that default to the build tree
// or the host, pointed into the image (ANVIL_<FLAG>, see internal/flagenv).
func Env() []string {
	return []string{
		"PATH=/usr/bin",
		"SSL_CERT_FILE=" + CABundlePath,
		"ANVIL_STATE_DIR=" + StateDir,
		"ANVIL_AGENT_ASSETS_DIR=" + AgentDir,
		"ANVIL_TFTP_ROOT=" + IPXEDir,
		// Named rather than found beside the provider through /proc/self/exe.
		"ANVIL_OMNI_ADAPTER=" + OmniAdapterPath,
	}
}

// Build builds the image.
func Build(ctx context.Context, opts Options) (v1.Image, error) {
	if opts.Version == "" {
		return nil, fmt.Errorf("the image needs a version")
	}

	specs, err := layers(opts)
	if err != nil {
		return nil, err
	}

	created := opts.Created.UTC()
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)

	for _, spec := range specs {
		if err = ctx.Err(); err != nil {
			return nil, err
		}

		layer, err := newLayer(created, spec.entries)
		if err != nil {
			return nil, fmt.Errorf("error building the %s layer: %w", spec.name, err)
		}

		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: "anvil imager image", Comment: spec.name},
		})
		if err != nil {
			return nil, fmt.Errorf("error adding the %s layer: %w", spec.name, err)
		}
	}

	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("error reading the image config: %w", err)
	}

	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = opts.Arch, "linux", v1.Time{Time: created}
	cfg.Config = config(opts, created)

	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, fmt.Errorf("error setting the image config: %w", err)
	}

	return img, nil
}

// config is what a runtime runs: the provider, as the anvil user, in its state directory.
func config(opts Options, created time.Time) v1.Config {
	ports := map[string]struct{}{}
	for _, p := range ExposedPorts {
		ports[p] = struct{}{}
	}

	labels := map[string]string{
		"org.opencontainers.image.title":       "anvil-provider",
		"org.opencontainers.image.description": "Anvil, bare-metal provisioning for Talos Linux: the PXE provider, standalone or as Omni's infra provider",
		"org.opencontainers.image.version":     opts.Version,
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}

	if opts.Revision != "" {
		labels["org.opencontainers.image.revision"] = opts.Revision
	}

	return v1.Config{
		Entrypoint:   []string{ProviderPath},
		Env:          Env(),
		User:         strconv.Itoa(UID) + ":" + strconv.Itoa(GID),
		WorkingDir:   StateDir,
		ExposedPorts: ports,
		// The state (database, CA, image cache) outlives the container.
		Volumes: map[string]struct{}{StateDir: {}},
		Labels:  labels,
	}
}
