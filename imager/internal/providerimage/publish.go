package providerimage

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TarballRepository names the image in a tarball: "docker load" and "podman load" tag it
// anvil-provider:<tag>.
const TarballRepository = "anvil-provider"

// WriteTarball writes img as a tarball "docker load" reads, tagged
// TarballRepository:tag, written beside file and moved in place at the end.
func WriteTarball(file string, img v1.Image, tag string) error {
	ref, err := name.NewTag(TarballRepository + ":" + tag)
	if err != nil {
		return fmt.Errorf("error naming the image in the tarball: %w", err)
	}

	dir := filepath.Dir(file)
	if err = os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", dir, err)
	}

	tmp, err := os.CreateTemp(dir, "."+filepath.Base(file)+"-")
	if err != nil {
		return fmt.Errorf("error creating a file beside %s: %w", file, err)
	}

	defer os.Remove(tmp.Name()) // gone once renamed; cleans up after a failure

	if err = tarball.Write(ref, img, tmp); err != nil {
		tmp.Close()

		return fmt.Errorf("error writing the image tarball: %w", err)
	}

	if err = tmp.Chmod(0o644); err != nil {
		tmp.Close()

		return fmt.Errorf("error setting the image tarball's mode: %w", err)
	}

	if err = tmp.Close(); err != nil {
		return fmt.Errorf("error writing the image tarball: %w", err)
	}

	if err = os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("error moving the image tarball to %s: %w", file, err)
	}

	return nil
}
