// Package extension builds the metal agent as a Talos system extension: an OCI image of
// one layer holding manifest.yaml and a rootfs with the agent, its extension service
// definition and the flag file that puts Talos in agent mode. Built reproducibly with
// go-containerregistry, no Docker: the same agent, version and time give the same digest.
package extension

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"path"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"go.yaml.in/yaml/v4"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Name is the extension's name: Omni (and Talos' ExtensionStatus) know the agent mode by it.
const Name = "metal-agent"

// TalosConstraint is the Talos versions the extension works with: agent mode (the flag
// file) came with Talos 1.9.
const TalosConstraint = ">= v1.9.0"

// Paths in the layer. The rootfs is overlaid on Talos' /; the service runs in
// ContainerDir.
const (
	ManifestPath = "manifest.yaml"
	ServicePath  = "rootfs/usr/local/etc/containers/" + Name + ".yaml"
	ContainerDir = "rootfs/usr/local/lib/containers/" + Name
	AgentPath    = ContainerDir + "/" + Name
	// FlagPath is Talos' constants.MetalAgentModeFlagPath: its presence makes Talos boot in
	// agent mode (no configuration is applied, the maintenance API stays up for Omni).
	FlagPath = "rootfs" + constants.MetalAgentModeFlagPath
)

// serviceYAML is the extension service definition (services.Spec in Talos' machinery).
//
//go:embed metal-agent.yaml
var serviceYAML []byte

// Options say what the image holds.
type Options struct {
	// Agent is the static metal-agent binary for Arch.
	Agent string
	// Version is the extension's version in its manifest.
	Version string
	// Arch is the image's architecture: amd64 or arm64.
	Arch string
	// Created is the image's creation time and every file's mtime (SOURCE_DATE_EPOCH, or
	// the epoch): the only time in the image, so that a rebuild is byte-identical.
	Created time.Time
}

// Build builds the extension image.
func Build(ctx context.Context, opts Options) (v1.Image, error) {
	if opts.Version == "" {
		return nil, fmt.Errorf("the extension needs a version")
	}

	if err := checkAgent(opts.Agent, opts.Arch); err != nil {
		return nil, err
	}

	agent, err := os.ReadFile(opts.Agent)
	if err != nil {
		return nil, fmt.Errorf("error reading the agent binary: %w", err)
	}

	manifest, err := Manifest(opts.Version)
	if err != nil {
		return nil, err
	}

	if err = ctx.Err(); err != nil {
		return nil, err
	}

	created := opts.Created.UTC()

	layer, err := newLayer(created, []file{
		{name: ManifestPath, mode: 0o644, data: manifest},
		{name: ServicePath, mode: 0o644, data: serviceYAML},
		{name: FlagPath, mode: 0o644},
		{name: AgentPath, mode: 0o755, data: agent},
	})
	if err != nil {
		return nil, fmt.Errorf("error building the extension's layer: %w", err)
	}

	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)

	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: "anvil imager extension", Comment: Name + " " + opts.Version},
	})
	if err != nil {
		return nil, fmt.Errorf("error adding the layer: %w", err)
	}

	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("error reading the image config: %w", err)
	}

	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = opts.Arch, "linux", v1.Time{Time: created}

	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, fmt.Errorf("error setting the image config: %w", err)
	}

	return img, nil
}

// Manifest is the extension's manifest.yaml, in Talos' own type.
func Manifest(version string) ([]byte, error) {
	m := extensions.Manifest{
		Version: "v1alpha1",
		Metadata: extensions.Metadata{
			Name:    Name,
			Version: version,
			Author:  "Anvil",
			Description: "Anvil's metal agent: registers the machine with the Anvil provider and carries out its orders " +
				"(wipe, BMC, reboot), while Talos runs in agent mode.",
			Compatibility: extensions.Compatibility{Talos: extensions.Constraint{Version: TalosConstraint}},
		},
	}

	var buf bytes.Buffer

	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)

	if err := enc.Encode(&m); err != nil {
		return nil, fmt.Errorf("error encoding the extension manifest: %w", err)
	}

	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("error encoding the extension manifest: %w", err)
	}

	return buf.Bytes(), nil
}

// ServiceYAML is the extension service definition the image carries.
func ServiceYAML() []byte { return bytes.Clone(serviceYAML) }

// dirsOf lists the directories above name, outermost first: "a/b/c" → "a", "a/b".
func dirsOf(name string) []string {
	var dirs []string

	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		dirs = append([]string{dir}, dirs...)
	}

	return dirs
}
