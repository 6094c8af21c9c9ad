package talosbuild

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// tree is a directory being filled as a root filesystem: paths are absolute inside it.
type tree struct{ root string }

func (t tree) host(p string) string {
	return filepath.Join(t.root, filepath.FromSlash(path.Clean("/"+p)))
}

func (t tree) mkdir(perm fs.FileMode, paths ...string) error {
	for _, p := range paths {
		if err := os.MkdirAll(t.host(p), 0o755); err != nil {
			return fmt.Errorf("error making %s: %w", p, err)
		}

		if err := os.Chmod(t.host(p), perm); err != nil {
			return fmt.Errorf("error setting %s's mode: %w", p, err)
		}
	}

	return nil
}

// symlink makes p a link to target, replacing what was there.
func (t tree) symlink(target, p string) error {
	if err := os.MkdirAll(filepath.Dir(t.host(p)), 0o755); err != nil {
		return fmt.Errorf("error making %s's directory: %w", p, err)
	}

	if err := os.Remove(t.host(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("error replacing %s: %w", p, err)
	}

	if err := os.Symlink(target, t.host(p)); err != nil {
		return fmt.Errorf("error linking %s: %w", p, err)
	}

	return nil
}

// touch makes empty files.
func (t tree) touch(paths ...string) error {
	for _, p := range paths {
		if err := t.write(p, 0o644, nil); err != nil {
			return err
		}
	}

	return nil
}

func (t tree) write(p string, perm fs.FileMode, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(t.host(p)), 0o755); err != nil {
		return fmt.Errorf("error making %s's directory: %w", p, err)
	}

	if err := os.WriteFile(t.host(p), data, perm); err != nil {
		return fmt.Errorf("error writing %s: %w", p, err)
	}

	return os.Chmod(t.host(p), perm) //nolint:wrapcheck // the path is in the error
}

// copyFile copies the regular file src (on the host) to p with perm.
func (t tree) copyFile(src, p string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("error opening %s: %w", src, err)
	}

	defer in.Close()

	if err := os.MkdirAll(filepath.Dir(t.host(p)), 0o755); err != nil {
		return fmt.Errorf("error making %s's directory: %w", p, err)
	}

	_ = os.Remove(t.host(p))

	out, err := os.OpenFile(t.host(p), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("error creating %s: %w", p, err)
	}

	if _, err := io.Copy(out, in); err != nil {
		out.Close()

		return fmt.Errorf("error copying %s to %s: %w", src, p, err)
	}

	if err := out.Close(); err != nil {
		return fmt.Errorf("error writing %s: %w", p, err)
	}

	return os.Chmod(t.host(p), perm) //nolint:wrapcheck // the path is in the error
}

// modeBits are the mode bits a copy keeps: the permissions, setuid, setgid and sticky.
const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// copyFrom copies the path p of the tree src (a file, link or directory, recursively)
// to the same path here, as it is (links stay links).
func (t tree) copyFrom(src tree, p string) error {
	return t.copyTo(src, p, p)
}

// copyTo copies src's path from to this tree's path to.
func (t tree) copyTo(src tree, from, to string) error {
	return filepath.WalkDir(src.host(from), func(hostPath string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("error reading %s: %w", from, err)
		}

		rel, err := filepath.Rel(src.host(from), hostPath)
		if err != nil {
			return err //nolint:wrapcheck // cannot happen: hostPath is under the root walked
		}

		dst := path.Join(to, filepath.ToSlash(rel))

		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("error reading %s: %w", hostPath, err)
		}

		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(hostPath)
			if err != nil {
				return fmt.Errorf("error reading link %s: %w", hostPath, err)
			}

			return t.symlink(target, dst)
		case d.IsDir():
			return t.mkdir(info.Mode()&modeBits, dst)
		case info.Mode().IsRegular():
			return t.copyFile(hostPath, dst, info.Mode()&modeBits)
		default:
			return nil // devices and pipes are not shipped by packages
		}
	})
}
