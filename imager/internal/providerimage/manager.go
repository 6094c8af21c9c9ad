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

// The Cluster API manager's image: its static binary alone, run as a numeric non-root
// user (Kubernetes' runAsNonRoot checks the number), with no state of its own.
const (
	ManagerPath = "/usr/bin/capi-manager"
	ManagerUID  = 65532
)

// ManagerOptions say what the manager's image holds.
type ManagerOptions struct {
	// Manager is the static capi-manager binary for Arch (CGO_ENABLED=0).
	Manager string
	// Arch is the image's architecture: amd64 or arm64.
	Arch string
	// Version and Revision label the image; Created is its only time.
	Version  string
	Revision string
	Created  time.Time
}

// BuildManager builds the Cluster API manager's image, reproducibly as Build does.
func BuildManager(ctx context.Context, opts ManagerOptions) (v1.Image, error) {
	if opts.Version == "" {
		return nil, fmt.Errorf("the image needs a version")
	}

	if err := checkStatic("capi-manager", opts.Manager, opts.Arch); err != nil {
		return nil, err
	}

	if err := ctx.Err(); err != nil {
		return nil, err
	}

	created := opts.Created.UTC()

	layer, err := newLayer(created, []entry{
		{name: rel(ManagerPath), mode: 0o755, src: opts.Manager},
		{name: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nnonroot:x:%d:%d:nonroot:/nonexistent:/usr/sbin/nologin\n", ManagerUID, ManagerUID))},
		{name: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", ManagerUID))},
	})
	if err != nil {
		return nil, fmt.Errorf("error building the manager layer: %w", err)
	}

	img, err := mutate.Append(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), mutate.Addendum{
		Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "anvil imager capi-release", Comment: "capi-manager"},
	})
	if err != nil {
		return nil, fmt.Errorf("error adding the manager layer: %w", err)
	}

	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("error reading the image config: %w", err)
	}

	labels := map[string]string{
		"org.opencontainers.image.title":       "anvil-capi-manager",
		"org.opencontainers.image.description": "Anvil's Cluster API infrastructure provider: MetalMachines on machines a standalone Anvil provider hands out",
		"org.opencontainers.image.version":     opts.Version,
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}

	if opts.Revision != "" {
		labels["org.opencontainers.image.revision"] = opts.Revision
	}

	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = opts.Arch, "linux", v1.Time{Time: created}
	cfg.Config = v1.Config{
		Entrypoint: []string{ManagerPath},
		User:       strconv.Itoa(ManagerUID) + ":" + strconv.Itoa(ManagerUID),
		Labels:     labels,
	}

	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, fmt.Errorf("error setting the image config: %w", err)
	}

	return img, nil
}
