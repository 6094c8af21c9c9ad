// Package initramfs writes initramfs archives (the agent's, the lab's real Talos and its
// extension layers): newc cpio, written in a reproducible way (sorted entries, fixed mtime,
// uid/gid 0, sequential inodes), then compressed with xz (CRC32, which the kernel requires) or zstd.
package initramfs

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/u-root/u-root/pkg/cpio"
)

// Entry is one file, directory or device node of the archive.
type Entry struct {
	// Mode holds the file type bits (cpio.S_IFREG...) and the permissions.
	Mode uint64
	// Data is the content of a regular file or a symlink's target, unless Source is set.
	Data []byte
	// Source is a file on disk whose content is streamed into the archive.
	Source string
	// Rmajor, Rminor name a device node.
	Rmajor, Rminor uint64
}

// Archive collects entries by path; it is written sorted, so the order things are added
// does not matter.
type Archive struct {
	// MTime of every entry (seconds since the epoch): 0 or SOURCE_DATE_EPOCH.
	MTime uint64

	entries map[string]Entry
}

// New returns an empty archive.
func New(mtime uint64) *Archive {
	return &Archive{MTime: mtime, entries: map[string]Entry{}}
}

// Dir adds a directory.
func (a *Archive) Dir(name string, perm uint64) {
	a.entries[clean(name)] = Entry{Mode: cpio.S_IFDIR | perm}
}

// File adds a regular file with the given content.
func (a *Archive) File(name string, perm uint64, data []byte) {
	a.entries[clean(name)] = Entry{Mode: cpio.S_IFREG | perm, Data: data}
}

// FileFrom adds a regular file whose content is read from src when the archive is written.
func (a *Archive) FileFrom(name string, perm uint64, src string) {
	a.entries[clean(name)] = Entry{Mode: cpio.S_IFREG | perm, Source: src}
}

// CharDev adds a character device node.
func (a *Archive) CharDev(name string, perm, major, minor uint64) {
	a.entries[clean(name)] = Entry{Mode: cpio.S_IFCHR | perm, Rmajor: major, Rminor: minor}
}

// Symlink adds a symbolic link.
func (a *Archive) Symlink(name, target string) {
	a.entries[clean(name)] = Entry{Mode: cpio.S_IFLNK | 0o777, Data: []byte(target)}
}

// Names returns the archive's paths, sorted, parents included.
func (a *Archive) Names() []string {
	a.addParents()

	names := make([]string, 0, len(a.entries))
	for name := range a.entries {
		names = append(names, name)
	}

	// Plain byte order puts every directory before what it holds (a prefix sorts first).
	sort.Strings(names)

	return names
}

// WriteTo writes the archive as newc cpio, trailer included, and returns the bytes written.
func (a *Archive) WriteTo(ctx context.Context, w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	rw := cpio.Newc.Writer(cw)

	for i, name := range a.Names() {
		if err := ctx.Err(); err != nil {
			return cw.n, err
		}

		rec, err := a.record(name, uint64(i+1))
		if err != nil {
			return cw.n, err
		}

		if err := rw.WriteRecord(rec); err != nil {
			return cw.n, fmt.Errorf("error writing %s to the archive: %w", name, err)
		}
	}

	if err := cpio.WriteTrailer(rw); err != nil {
		return cw.n, fmt.Errorf("error writing the archive trailer: %w", err)
	}

	return cw.n, nil
}

func (a *Archive) record(name string, ino uint64) (cpio.Record, error) {
	e := a.entries[name]
	// NLink 1 everywhere: the kernel treats regular files with NLink ≥ 2 as hard links
	// to an earlier inode with the same number.
	info := cpio.Info{
		Ino:    ino,
		Mode:   e.Mode,
		NLink:  1,
		MTime:  a.MTime,
		Name:   name,
		Rmajor: e.Rmajor,
		Rminor: e.Rminor,
	}

	if e.Source == "" {
		if e.Mode&cpio.S_IFMT == cpio.S_IFREG || e.Mode&cpio.S_IFMT == cpio.S_IFLNK {
			return cpio.StaticRecord(e.Data, info), nil
		}

		return cpio.Record{Info: info}, nil
	}

	// The cpio writer closes the file once copied.
	f, err := os.Open(e.Source)
	if err != nil {
		return cpio.Record{}, fmt.Errorf("error opening %s for %s: %w", e.Source, name, err)
	}

	st, err := f.Stat()
	if err != nil {
		f.Close()

		return cpio.Record{}, fmt.Errorf("error reading %s for %s: %w", e.Source, name, err)
	}

	info.FileSize = uint64(st.Size()) //nolint:gosec // a file's size: not negative

	return cpio.Record{ReaderAt: f, Info: info}, nil
}

// addParents adds every missing parent directory (mode 0755).
func (a *Archive) addParents() {
	for name := range a.entries {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if _, ok := a.entries[dir]; ok {
				break
			}

			a.entries[dir] = Entry{Mode: cpio.S_IFDIR | 0o755}
		}
	}
}

// clean turns "/lib/modules/" into "lib/modules", the form cpio names take.
func clean(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)

	return n, err
}
