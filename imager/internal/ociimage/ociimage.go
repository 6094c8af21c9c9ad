// Package ociimage writes the images the imager builds (the agent's extension, the
// provider's image) as OCI image layouts and pushes them to registries, whatever they hold.
package ociimage

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// refNameAnnotation names an image in an OCI layout's index (the OCI image spec's
// org.opencontainers.image.ref.name).
const refNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes img as the only image of an OCI image layout in dir, named tag in the
// index. The layout is written beside dir and put in its place at the end, so a failed
// write leaves the previous one whole and a rebuild leaves no stale blobs behind.
func WriteLayout(ctx context.Context, dir string, img v1.Image, tag string) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", parent, err)
	}

	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+"-")
	if err != nil {
		return fmt.Errorf("error creating a directory beside %s: %w", dir, err)
	}

	defer os.RemoveAll(tmp) // gone once renamed; cleans up after a failure

	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("error writing the OCI layout: %w", err)
	}

	if err = ctx.Err(); err != nil {
		return err
	}

	if err = p.AppendImage(img, layout.WithAnnotations(map[string]string{refNameAnnotation: tag})); err != nil {
		return fmt.Errorf("error writing the image to the OCI layout: %w", err)
	}

	// go-containerregistry leaves blobs 0600 (temporary files renamed) and the index
	// 0755: the same modes everywhere, readable by whoever serves or pushes the layout.
	if err = normalizeModes(tmp); err != nil {
		return fmt.Errorf("error setting the layout's file modes: %w", err)
	}

	if err = os.RemoveAll(dir); err != nil {
		return fmt.Errorf("error removing the previous layout %s: %w", dir, err)
	}

	if err = os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("error moving the layout to %s: %w", dir, err)
	}

	return nil
}

// normalizeModes makes dir's directories 0755 and files 0644, within dir only.
func normalizeModes(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}

	defer root.Close()

	return fs.WalkDir(root.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}

		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}

		return root.Chmod(path, mode)
	})
}

// Push pushes img to ref (registry/repository:tag) with the credentials of the Docker
// config (~/.docker/config.json, as crane and docker login keep them), over plain HTTP
// when insecure. It returns the pushed image by digest.
func Push(ctx context.Context, img v1.Image, ref string, insecure bool) (name.Digest, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}

	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return name.Digest{}, fmt.Errorf("invalid image reference %q: %w", ref, err)
	}

	if err = remote.Write(r, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return name.Digest{}, fmt.Errorf("error pushing the image to %s: %w", r, err)
	}

	digest, err := img.Digest()
	if err != nil {
		return name.Digest{}, fmt.Errorf("error computing the image digest: %w", err)
	}

	return r.Context().Digest(digest.String()), nil
}
