// Package elfdeps finds what a dynamically linked program needs to run from a root tree
// other than the host's: its interpreter and the shared libraries its ELF headers name
// (DT_NEEDED), transitively, searched as the dynamic loader would (DT_RUNPATH, then the
// default multiarch directories). The imager copies exactly that closure out of unpacked
// Debian packages into an image, instead of whole packages.
package elfdeps

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultLibDirs are where the amd64 Debian loader looks for libraries without a cache:
// its multiarch directories, then the classic ones. Paths are inside the root.
var DefaultLibDirs = []string{
	"/usr/lib/x86_64-linux-gnu",
	"/lib/x86_64-linux-gnu",
	"/usr/lib",
	"/lib",
}

// mergedUsr are the top-level directories a merged-/usr system links into /usr.
var mergedUsr = map[string]string{"/bin": "/usr/bin", "/sbin": "/usr/sbin", "/lib": "/usr/lib", "/lib64": "/usr/lib64"}

// Closure returns, sorted, the paths inside root (absolute, as the running system sees
// them) of every file the programs at paths (inside root too) need: each program's
// interpreter and each library it needs, transitively. A path that is a symlink inside
// root is listed with every link on the way, and the file it ends at, so the copy
// resolves as the original did; in a tree without /lib64, /lib, /bin or /sbin (packages
// of a merged-/usr distribution, unpacked) those are /usr's. A statically linked program needs nothing. A library
// found nowhere is an error naming it and who needs it: the image would not run.
func Closure(root string, paths []string, libDirs []string) ([]string, error) {
	if libDirs == nil {
		libDirs = DefaultLibDirs
	}

	c := &closure{root: root, libDirs: libDirs, files: map[string]bool{}, seen: map[string]bool{}}

	for _, p := range paths {
		if err := c.program(p); err != nil {
			return nil, err
		}
	}

	out := make([]string, 0, len(c.files))
	for f := range c.files {
		out = append(out, f)
	}

	slices.Sort(out)

	return out, nil
}

type closure struct {
	root    string
	libDirs []string
	// files are the paths to copy, links and targets alike.
	files map[string]bool
	// seen are the ELF files (resolved paths) already walked.
	seen map[string]bool
}

// program adds p, whatever links lead to it, and what it needs.
func (c *closure) program(p string) error {
	resolved, err := c.resolve(p)
	if err != nil {
		return err
	}

	return c.walk(resolved, p)
}

// walk adds the needs of the ELF file at resolved (inside root); who is what names it in
// errors.
func (c *closure) walk(resolved, who string) error {
	if c.seen[resolved] {
		return nil
	}

	c.seen[resolved] = true

	f, err := elf.Open(filepath.Join(c.root, resolved))
	if err != nil {
		return fmt.Errorf("error reading %s as ELF: %w", who, err)
	}

	defer f.Close()

	interp, err := interpreter(f)
	if err != nil {
		return fmt.Errorf("error reading %s's interpreter: %w", who, err)
	}

	if interp != "" {
		r, err := c.resolve(interp)
		if err != nil {
			return fmt.Errorf("%s's interpreter: %w", who, err)
		}

		if err := c.walk(r, interp); err != nil {
			return err
		}
	}

	needed, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("error reading %s's needed libraries: %w", who, err)
	}

	runpath, err := runpaths(f, path.Dir(resolved))
	if err != nil {
		return fmt.Errorf("error reading %s's run path: %w", who, err)
	}

	for _, lib := range needed {
		found, err := c.find(lib, runpath)
		if err != nil {
			return fmt.Errorf("%s needs %s: %w", who, lib, err)
		}

		if err := c.walk(found, lib); err != nil {
			return err
		}
	}

	dlopened, err := dlopenNotes(f)
	if err != nil {
		return fmt.Errorf("error reading %s's dlopen notes: %w", who, err)
	}

	// A library a program may dlopen is an optional feature: taken when the tree has it.
	for _, alternatives := range dlopened {
		for _, lib := range alternatives {
			found, err := c.find(lib, runpath)
			if err != nil {
				continue
			}

			if err := c.walk(found, lib); err != nil {
				return err
			}

			break
		}
	}

	return nil
}

// find looks lib up in the run path, then the default directories, and adds it.
func (c *closure) find(lib string, runpath []string) (string, error) {
	if strings.Contains(lib, "/") {
		return c.resolve(lib)
	}

	for _, dir := range slices.Concat(runpath, c.libDirs) {
		// Looked up inside root, as the file would be copied: an absolute link in the tree
		// must not be followed on the host.
		r := resolver{root: c.root, budget: maxLinks}

		found, err := r.resolve(path.Join(dir, lib))
		if err != nil {
			continue
		}

		c.add(r.links, found)

		return found, nil
	}

	return "", fmt.Errorf("not found in %v under %s", slices.Concat(runpath, c.libDirs), c.root)
}

// resolve follows p's symlinks inside root (an absolute target is inside root too),
// adding every link met and the final file; it returns the final path.
func (c *closure) resolve(p string) (string, error) {
	r := resolver{root: c.root, budget: maxLinks}

	found, err := r.resolve(p)
	if err != nil {
		return "", err
	}

	c.add(r.links, found)

	return found, nil
}

func (c *closure) add(links []string, file string) {
	for _, l := range links {
		c.files[l] = true
	}

	c.files[file] = true
}

// maxLinks bounds the symlinks followed for one path, as the kernel's ELOOP does.
const maxLinks = 40

// resolver follows one path's symlinks inside root, remembering the links it met.
type resolver struct {
	root  string
	links []string
	// budget is how many more links may be followed.
	budget int
}

// resolve returns the file p ends at inside root, its directories' links and its own
// followed.
func (r *resolver) resolve(p string) (string, error) {
	p = path.Clean("/" + p)

	for {
		// Resolve the directories first: /lib is often a link to usr/lib.
		dir, err := r.dir(path.Dir(p))
		if err != nil {
			return "", err
		}

		p = path.Join(dir, path.Base(p))

		st, err := os.Lstat(filepath.Join(r.root, p))
		if err != nil {
			return "", fmt.Errorf("error looking up %s: %w", p, err)
		}

		if st.IsDir() {
			return "", fmt.Errorf("%s is a directory", p)
		}

		if st.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}

		if p, err = r.follow(p); err != nil {
			return "", err
		}
	}
}

// follow reads the link p: its target, absolute inside root.
func (r *resolver) follow(p string) (string, error) {
	if r.budget--; r.budget < 0 {
		return "", fmt.Errorf("too many links resolving %s", p)
	}

	r.links = append(r.links, p)

	target, err := os.Readlink(filepath.Join(r.root, p))
	if err != nil {
		return "", fmt.Errorf("error reading link %s: %w", p, err)
	}

	if !path.IsAbs(target) {
		target = path.Join(path.Dir(p), target)
	}

	return path.Clean(target), nil
}

// dir resolves the links among dir's components, the last one included.
func (r *resolver) dir(dir string) (string, error) {
	if dir == "/" {
		return dir, nil
	}

	parent, err := r.dir(path.Dir(dir))
	if err != nil {
		return "", err
	}

	p := path.Join(parent, path.Base(dir))

	st, err := os.Lstat(filepath.Join(r.root, p))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// Packages of a merged-/usr distribution ship their files under /usr; the
			// top-level links (/lib64 → usr/lib64) come from the base system, which an
			// unpacked tree lacks.
			if usr, ok := mergedUsr[p]; ok {
				return usr, nil
			}

			return p, nil
		}

		return "", fmt.Errorf("error looking up %s: %w", p, err)
	}

	if st.Mode()&fs.ModeSymlink == 0 {
		return p, nil
	}

	target, err := r.follow(p)
	if err != nil {
		return "", err
	}

	return r.dir(target)
}

// The ELF note systemd, kmod and others list the libraries they dlopen in
// (https://systemd.io/ELF_DLOPEN_METADATA/): owner "FDO", this type, a JSON array.
const (
	dlopenSection  = ".note.dlopen"
	dlopenOwner    = "FDO"
	dlopenNoteType = 0x407c0c0a
)

// dlopenNotes are the sonames the file says it may dlopen: per feature, alternatives in
// order of preference.
func dlopenNotes(f *elf.File) ([][]string, error) {
	sec := f.Section(dlopenSection)
	if sec == nil {
		return nil, nil
	}

	data, err := sec.Data()
	if err != nil {
		return nil, err //nolint:wrapcheck // wrapped by the caller
	}

	return parseDlopenNotes(data, f.ByteOrder)
}

// parseDlopenNotes reads the ELF notes in data (a .note.dlopen section's bytes): each a
// header of name size, descriptor size and type, then the name and the descriptor, each
// padded to 4 bytes. FDO notes of the dlopen type hold a JSON array of features, each
// with its sonames; other notes are skipped. Zero bytes after the last note are padding.
func parseDlopenNotes(data []byte, order binary.ByteOrder) ([][]string, error) {
	var out [][]string

	for len(data) > 0 {
		if len(data) < 12 {
			if bytes.Count(data, []byte{0}) == len(data) {
				break // the section's alignment padding
			}

			return nil, fmt.Errorf("truncated note header in %s", dlopenSection)
		}

		namesz, descsz, typ := order.Uint32(data), order.Uint32(data[4:]), order.Uint32(data[8:])
		data = data[12:]

		nameEnd, descEnd := align4(namesz), align4(namesz)+align4(descsz)
		if uint64(len(data)) < descEnd {
			return nil, fmt.Errorf("truncated note in %s", dlopenSection)
		}

		name := strings.TrimRight(string(data[:namesz]), "\x00")
		desc := bytes.TrimRight(data[nameEnd:nameEnd+uint64(descsz)], "\x00")
		data = data[descEnd:]

		if name != dlopenOwner || typ != dlopenNoteType {
			continue
		}

		var features []struct {
			Soname []string `json:"soname"`
		}

		if err := json.Unmarshal(desc, &features); err != nil {
			return nil, fmt.Errorf("error decoding a note in %s: %w", dlopenSection, err)
		}

		for _, ft := range features {
			out = append(out, ft.Soname)
		}
	}

	return out, nil
}

func align4(n uint32) uint64 { return (uint64(n) + 3) &^ 3 }

// interpreter is the program's PT_INTERP, "" for a static one.
func interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}

		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", err //nolint:wrapcheck // wrapped by the caller
		}

		return strings.TrimRight(string(b), "\x00"), nil
	}

	return "", nil
}

// runpaths are the file's DT_RUNPATH (else DT_RPATH) directories, $ORIGIN expanded to
// origin.
func runpaths(f *elf.File, origin string) ([]string, error) {
	paths, err := f.DynString(elf.DT_RUNPATH)
	if err != nil {
		return nil, err //nolint:wrapcheck // wrapped by the caller
	}

	if len(paths) == 0 {
		if paths, err = f.DynString(elf.DT_RPATH); err != nil {
			return nil, err //nolint:wrapcheck // wrapped by the caller
		}
	}

	var dirs []string

	for _, p := range paths {
		for d := range strings.SplitSeq(p, ":") {
			d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
			if d != "" {
				dirs = append(dirs, d)
			}
		}
	}

	return dirs, nil
}
