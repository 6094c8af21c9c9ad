// Package capirelease assembles the Cluster API provider's release for clusterctl: the
// components a user applies to a management cluster (CRDs, RBAC, the manager's
// Deployment with its image), and the metadata clusterctl reads, from deploy/capi.
package capirelease

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ImagePlaceholder stands for the manager's image reference in deploy/capi/manager.yaml.
const ImagePlaceholder = "@IMAGE@"

// Components is infrastructure-components.yaml: every CRD in dir/crd (by name), the
// ClusterRole in dir/rbac, then dir/manager.yaml with image in place, as one YAML stream.
// clusterctl's ${VAR} variables are left for clusterctl.
func Components(dir, image string) ([]byte, error) {
	if image == "" || strings.ContainsAny(image, " \n\"'") {
		return nil, fmt.Errorf("invalid image reference %q", image)
	}

	crds, err := filepath.Glob(filepath.Join(dir, "crd", "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("error listing the CRDs: %w", err)
	}

	if len(crds) == 0 {
		return nil, fmt.Errorf("no CRDs in %s (make generate writes them)", filepath.Join(dir, "crd"))
	}

	slices.Sort(crds)

	var out bytes.Buffer

	for _, f := range append(crds, filepath.Join(dir, "rbac", "role.yaml"), filepath.Join(dir, "manager.yaml")) {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("error reading %s: %w", f, err)
		}

		if filepath.Base(f) == "manager.yaml" {
			if !bytes.Contains(b, []byte(ImagePlaceholder)) {
				return nil, fmt.Errorf("%s has no %s to put the image in", f, ImagePlaceholder)
			}

			b = bytes.ReplaceAll(b, []byte(ImagePlaceholder), []byte(image))
		}

		b = bytes.TrimPrefix(bytes.TrimSpace(b), []byte("---\n"))

		out.WriteString("---\n")
		out.Write(b)
		out.WriteString("\n")
	}

	return out.Bytes(), nil
}

// Write writes infrastructure-components.yaml and metadata.yaml (dir/metadata.yaml) into out.
func Write(dir, out, image string) error {
	components, err := Components(dir, image)
	if err != nil {
		return err
	}

	metadata, err := os.ReadFile(filepath.Join(dir, "metadata.yaml"))
	if err != nil {
		return fmt.Errorf("error reading the clusterctl metadata: %w", err)
	}

	if err = os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", out, err)
	}

	for name, b := range map[string][]byte{"infrastructure-components.yaml": components, "metadata.yaml": metadata} {
		if err = os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			return fmt.Errorf("error writing %s: %w", name, err)
		}
	}

	return nil
}
