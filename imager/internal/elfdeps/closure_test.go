package elfdeps

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The host's dynamic loader as programs name it (Debian 12, amd64).
const hostInterp = "/lib64/ld-linux-x86-64.so.2"

// hostProgram is a dynamically linked program of the host, or the test is skipped.
func hostProgram(t *testing.T, p string) {
	t.Helper()

	f, err := elf.Open(p)
	if err != nil {
		t.Skipf("no host program %s: %v", p, err)
	}

	defer f.Close()

	if interp, err := interpreter(f); err != nil || interp != hostInterp {
		t.Skipf("%s is not a dynamic amd64 program loaded by %s (%q, %v)", p, hostInterp, interp, err)
	}
}

// TestClosureHost: a dynamic host program's closure from "/" holds the program, every
// link on the way to its interpreter and to libc, and the files they end at; no
// directory (a copy of the list would copy it whole).
func TestClosureHost(t *testing.T) {
	t.Parallel()

	hostProgram(t, "/usr/bin/ls")

	files, err := Closure("/", []string{"/usr/bin/ls"}, nil)
	require.NoError(t, err)

	assert.True(t, slices.IsSorted(files))

	libc := slices.IndexFunc(files, func(f string) bool { return path.Base(f) == "libc.so.6" })
	require.GreaterOrEqual(t, libc, 0, "libc in %v", files)

	for _, p := range []string{"/usr/bin/ls", hostInterp, files[libc]} {
		links, final := hostChain(t, p)
		for _, l := range links {
			assert.Contains(t, files, l, "the link %s on the way to %s", l, p)
		}

		assert.Contains(t, files, final, "the file %s ends at", p)
	}

	for _, f := range files {
		st, err := os.Lstat(f)
		require.NoError(t, err)

		if st.Mode()&os.ModeSymlink == 0 {
			assert.True(t, st.Mode().IsRegular(), "%s is a file", f)

			continue
		}

		links, final := hostChain(t, f)
		assert.Subset(t, files, links, "the links on the way from %s", f)

		if st, err := os.Stat(final); err == nil && !st.IsDir() {
			assert.Contains(t, files, final, "where %s leads", f)
		}
	}
}

// hostChain resolves p on the host component by component, as the kernel does: the links
// met (each by a path without links before it) and the file it ends at.
func hostChain(t *testing.T, p string) ([]string, string) {
	t.Helper()

	var links []string

	resolved, rest := "/", strings.Split(strings.Trim(p, "/"), "/")

	for len(rest) > 0 {
		require.Less(t, len(links), 40, "links resolving %s", p)

		next := path.Join(resolved, rest[0])
		rest = rest[1:]

		st, err := os.Lstat(next)
		require.NoError(t, err)

		if st.Mode()&os.ModeSymlink == 0 {
			resolved = next

			continue
		}

		links = append(links, next)

		target, err := os.Readlink(next)
		require.NoError(t, err)

		if path.IsAbs(target) {
			resolved = "/"
		}

		rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
	}

	return links, resolved
}

// debianTree lays out what unpacking merged-/usr Debian packages (trixie's libc6 and
// coreutils) gives: everything under /usr, no top-level /lib64, /lib or /bin links (the
// base system makes those). The host's true, loader and libc are copied in; links are
// made by each case.
func debianTree(t *testing.T, links map[string]string, files map[string]string) string {
	t.Helper()

	root := t.TempDir()

	for to, from := range files {
		copyHostFile(t, from, filepath.Join(root, to))
	}

	for p, target := range links {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		require.NoError(t, os.Symlink(target, filepath.Join(root, p)))
	}

	return root
}

func copyHostFile(t *testing.T, from, to string) {
	t.Helper()

	in, err := os.Open(from)
	require.NoError(t, err)

	defer in.Close()

	require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))

	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	require.NoError(t, err)

	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

// TestClosureMergedUsrTree: in an unpacked tree the interpreter /lib64/ld-linux-x86-64.so.2
// is found under /usr (the mergedUsr map), through relative and absolute links, and what
// is missing is an error naming it and who needs it.
func TestClosureMergedUsrTree(t *testing.T) {
	t.Parallel()

	hostProgram(t, "/usr/bin/true")

	ldso, err := filepath.EvalSymlinks(hostInterp)
	require.NoError(t, err)

	libc, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libc.so.6")
	require.NoError(t, err)

	const (
		multiarch = "/usr/lib/x86_64-linux-gnu"
		lib64     = "/usr/lib64/ld-linux-x86-64.so.2"
	)

	program := map[string]string{"/usr/bin/true": "/usr/bin/true"}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for _, src := range []map[string]string{program, extra} {
			for k, v := range src {
				m[k] = v
			}
		}

		return m
	}

	for _, tc := range []struct {
		name     string
		programs []string
		files    map[string]string // path in the tree: host file
		links    map[string]string
		want     []string
		err      []string
	}{
		{
			// trixie's libc6: the loader in the multiarch directory, /usr/lib64's link to it.
			name:  "trixie",
			files: with(map[string]string{multiarch + "/ld-linux-x86-64.so.2": ldso, multiarch + "/libc.so.6": libc}),
			links: map[string]string{lib64: "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
			want:  []string{"/usr/bin/true", multiarch + "/ld-linux-x86-64.so.2", multiarch + "/libc.so.6", lib64},
		},
		{
			name:  "a relative chain",
			files: with(map[string]string{multiarch + "/ld-2.99.so": ldso, multiarch + "/libc-2.99.so": libc}),
			links: map[string]string{
				lib64:                               "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
				multiarch + "/ld-linux-x86-64.so.2": "ld-2.99.so",
				multiarch + "/libc.so.6":            "./libc-2.99.so",
			},
			want: []string{
				"/usr/bin/true", multiarch + "/ld-2.99.so", multiarch + "/ld-linux-x86-64.so.2", multiarch + "/libc-2.99.so",
				multiarch + "/libc.so.6", lib64,
			},
		},
		{
			// Absolute targets are inside the tree, through /lib which it lacks too; the
			// names are not the host's, so nothing resolves against the host's /.
			name:  "absolute links",
			files: with(map[string]string{multiarch + "/anvil-test-ld.so": ldso, multiarch + "/anvil-test-libc.so": libc}),
			links: map[string]string{
				lib64:                               "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
				multiarch + "/ld-linux-x86-64.so.2": "/usr/lib/x86_64-linux-gnu/anvil-test-ld.so",
				multiarch + "/libc.so.6":            "/lib/x86_64-linux-gnu/anvil-test-libc.so",
			},
			want: []string{
				"/usr/bin/true", multiarch + "/anvil-test-ld.so", multiarch + "/anvil-test-libc.so",
				multiarch + "/ld-linux-x86-64.so.2", multiarch + "/libc.so.6", lib64,
			},
		},
		{
			name:     "the program by its merged-/usr name",
			programs: []string{"/bin/true"},
			files:    with(map[string]string{multiarch + "/ld-linux-x86-64.so.2": ldso, multiarch + "/libc.so.6": libc}),
			links:    map[string]string{lib64: "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
			want:     []string{"/usr/bin/true", multiarch + "/ld-linux-x86-64.so.2", multiarch + "/libc.so.6", lib64},
		},
		{
			name:     "a program through a link",
			programs: []string{"/usr/sbin/true"},
			files:    with(map[string]string{multiarch + "/ld-linux-x86-64.so.2": ldso, multiarch + "/libc.so.6": libc}),
			links:    map[string]string{lib64: "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/usr/sbin/true": "../bin/true"},
			want:     []string{"/usr/bin/true", multiarch + "/ld-linux-x86-64.so.2", multiarch + "/libc.so.6", "/usr/sbin/true", lib64},
		},
		{
			name:  "no libc",
			files: with(map[string]string{multiarch + "/ld-linux-x86-64.so.2": ldso}),
			links: map[string]string{lib64: "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
			err:   []string{"/usr/bin/true needs libc.so.6", "not found"},
		},
		{
			name:  "a dangling libc link",
			files: with(map[string]string{multiarch + "/ld-linux-x86-64.so.2": ldso}),
			links: map[string]string{lib64: "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", multiarch + "/libc.so.6": "libc-2.99.so"},
			err:   []string{"/usr/bin/true needs libc.so.6"},
		},
		{
			name:  "no loader",
			files: with(map[string]string{multiarch + "/libc.so.6": libc}),
			err:   []string{"/usr/bin/true's interpreter", "/usr/lib64/ld-linux-x86-64.so.2"},
		},
		{
			name:     "no program",
			programs: []string{"/usr/bin/false"},
			files:    with(nil),
			err:      []string{"/usr/bin/false"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			root := debianTree(t, tc.links, tc.files)

			programs := tc.programs
			if programs == nil {
				programs = []string{"/usr/bin/true"}
			}

			files, err := Closure(root, programs, nil)
			if tc.err != nil {
				require.Error(t, err)

				for _, s := range tc.err {
					assert.ErrorContains(t, err, s)
				}

				return
			}

			require.NoError(t, err)
			assert.Equal(t, sorted(tc.want), files)
		})
	}
}

// TestClosureStatic: a static Go program needs nothing but itself.
func TestClosureStatic(t *testing.T) {
	t.Parallel()

	root := t.TempDir()
	staticProgram(t, filepath.Join(root, "usr", "bin", "static"))

	files, err := Closure(root, []string{"/usr/bin/static"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/bin/static"}, files)
}

// staticProgram builds a static Go program at out.
func staticProgram(t *testing.T, out string) {
	t.Helper()

	if testing.Short() {
		t.Skip("builds a Go program")
	}

	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "go.mod"), []byte("module static\n\ngo 1.22\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644))

	cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOFLAGS=")

	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
}

// fakeELF is a shared object of the given needs: no code, just what Closure reads — a
// PT_INTERP when interp is set, a .dynamic section with DT_NEEDED, DT_RUNPATH and DT_RPATH
// entries over its .dynstr, and a .note.dlopen section when notes is set.
type fakeELF struct {
	interp          string
	needed          []string
	runpath, rpath  string
	dlopen          [][]string
	brokenDlopenSec bool
}

func (e fakeELF) bytes(t *testing.T) []byte {
	t.Helper()

	le := binary.LittleEndian

	// .dynstr and .dynamic.
	dynstr := []byte{0}
	str := func(s string) uint64 {
		off := len(dynstr)
		dynstr = append(append(dynstr, s...), 0)

		return uint64(off)
	}

	var dynamic []byte

	entry := func(tag elf.DynTag, v uint64) {
		dynamic = le.AppendUint64(le.AppendUint64(dynamic, uint64(tag)), v)
	}

	for _, n := range e.needed {
		entry(elf.DT_NEEDED, str(n))
	}

	if e.runpath != "" {
		entry(elf.DT_RUNPATH, str(e.runpath))
	}

	if e.rpath != "" {
		entry(elf.DT_RPATH, str(e.rpath))
	}

	entry(elf.DT_NULL, 0)

	var notes []byte

	if e.dlopen != nil {
		var features []string
		for _, sonames := range e.dlopen {
			features = append(features, `{"feature":"f","soname":["`+strings.Join(sonames, `","`)+`"]}`)
		}

		notes = note(le, dlopenOwner, dlopenNoteType, "["+strings.Join(features, ",")+"]")
		if e.brokenDlopenSec {
			notes = notes[:len(notes)-8]
		}
	}

	type section struct {
		name       string
		typ        elf.SectionType
		data       []byte
		link, size uint64
	}

	sections := []section{
		{name: ".interp", typ: elf.SHT_PROGBITS, data: append([]byte(e.interp), 0)},
		{name: ".dynstr", typ: elf.SHT_STRTAB, data: dynstr},
		{name: ".dynamic", typ: elf.SHT_DYNAMIC, data: dynamic, link: 2, size: 16},
		{name: dlopenSection, typ: elf.SHT_NOTE, data: notes},
	}

	shstrtab := []byte{0}
	nameOff := make([]uint32, len(sections)+1)

	for i, s := range append(sections, section{name: ".shstrtab"}) {
		nameOff[i] = uint32(len(shstrtab))
		shstrtab = append(append(shstrtab, s.name...), 0)
	}

	sections = append(sections, section{name: ".shstrtab", typ: elf.SHT_STRTAB, data: shstrtab})

	const ehsize, phsize, shsize = 64, 56, 64

	phnum := 0
	if e.interp != "" {
		phnum = 1
	}

	// Data after the headers, each section 8-aligned; section headers at the end.
	off := uint64(ehsize + phnum*phsize)
	offsets := make([]uint64, len(sections))

	var body bytes.Buffer

	for i, s := range sections {
		for (off+uint64(body.Len()))%8 != 0 {
			body.WriteByte(0)
		}

		offsets[i] = off + uint64(body.Len())
		body.Write(s.data)
	}

	for (off+uint64(body.Len()))%8 != 0 {
		body.WriteByte(0)
	}

	shoff := off + uint64(body.Len())

	var b []byte

	b = append(b, 0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT))
	b = append(b, make([]byte, 9)...)
	b = le.AppendUint16(b, uint16(elf.ET_DYN))
	b = le.AppendUint16(b, uint16(elf.EM_X86_64))
	b = le.AppendUint32(b, uint32(elf.EV_CURRENT))
	b = le.AppendUint64(b, 0) // entry

	if phnum > 0 {
		b = le.AppendUint64(b, ehsize)
	} else {
		b = le.AppendUint64(b, 0)
	}

	b = le.AppendUint64(b, shoff)
	b = le.AppendUint32(b, 0) // flags
	b = le.AppendUint16(b, ehsize)
	b = le.AppendUint16(b, phsize)
	b = le.AppendUint16(b, uint16(phnum))
	b = le.AppendUint16(b, shsize)
	b = le.AppendUint16(b, uint16(len(sections)+1))
	b = le.AppendUint16(b, uint16(len(sections)))

	if phnum > 0 {
		interp := sections[0]
		b = le.AppendUint32(b, uint32(elf.PT_INTERP))
		b = le.AppendUint32(b, uint32(elf.PF_R))
		b = le.AppendUint64(b, offsets[0])
		b = le.AppendUint64(b, 0)
		b = le.AppendUint64(b, 0)
		b = le.AppendUint64(b, uint64(len(interp.data)))
		b = le.AppendUint64(b, uint64(len(interp.data)))
		b = le.AppendUint64(b, 1)
	}

	b = append(b, body.Bytes()...)

	b = append(b, make([]byte, shsize)...) // SHT_NULL
	for i, s := range sections {
		b = le.AppendUint32(b, nameOff[i])
		b = le.AppendUint32(b, uint32(s.typ))
		b = le.AppendUint64(b, 0) // flags
		b = le.AppendUint64(b, 0) // addr
		b = le.AppendUint64(b, offsets[i])
		b = le.AppendUint64(b, uint64(len(s.data)))
		b = le.AppendUint32(b, uint32(s.link))
		b = le.AppendUint32(b, 0) // info
		b = le.AppendUint64(b, 1) // addralign
		b = le.AppendUint64(b, s.size)
	}

	// The reader must see what was meant.
	f, err := elf.NewFile(bytes.NewReader(b))
	require.NoError(t, err)

	needed, err := f.ImportedLibraries()
	require.NoError(t, err)
	assert.Equal(t, len(e.needed), len(needed))

	return b
}

// TestClosureFakeELF: run paths ($ORIGIN), the default directories, dlopen notes,
// transitive needs and cycles, over hand-made shared objects.
func TestClosureFakeELF(t *testing.T) {
	t.Parallel()

	const multiarch = "/usr/lib/x86_64-linux-gnu"

	leaf := fakeELF{}

	for _, tc := range []struct {
		name     string
		tree     map[string]fakeELF
		links    map[string]string
		programs []string
		libDirs  []string
		want     []string
		err      []string
	}{
		{
			name: "$ORIGIN run path before the default directories",
			tree: map[string]fakeELF{
				"/opt/app/bin/prog":        {needed: []string{"libfoo.so.1"}, runpath: "$ORIGIN/../lib"},
				"/opt/app/lib/libfoo.so.1": leaf,
				multiarch + "/libfoo.so.1": leaf,
			},
			programs: []string{"/opt/app/bin/prog"},
			want:     []string{"/opt/app/bin/prog", "/opt/app/lib/libfoo.so.1"},
		},
		{
			name: "${ORIGIN}, several directories, the empty ones skipped",
			tree: map[string]fakeELF{
				"/opt/app/bin/prog":        {needed: []string{"libfoo.so.1", "libbar.so.1"}, runpath: "::${ORIGIN}/../lib:/opt/other"},
				"/opt/app/lib/libfoo.so.1": leaf,
				"/opt/other/libbar.so.1":   leaf,
			},
			programs: []string{"/opt/app/bin/prog"},
			want:     []string{"/opt/app/bin/prog", "/opt/app/lib/libfoo.so.1", "/opt/other/libbar.so.1"},
		},
		{
			name: "$ORIGIN is the program's own directory, through a link",
			tree: map[string]fakeELF{
				"/opt/app/bin/prog":        {needed: []string{"libfoo.so.1"}, runpath: "$ORIGIN/../lib"},
				"/opt/app/lib/libfoo.so.1": leaf,
			},
			links:    map[string]string{"/usr/bin/prog": "/opt/app/bin/prog"},
			programs: []string{"/usr/bin/prog"},
			want:     []string{"/opt/app/bin/prog", "/opt/app/lib/libfoo.so.1", "/usr/bin/prog"},
		},
		{
			name: "DT_RPATH without DT_RUNPATH",
			tree: map[string]fakeELF{
				"/opt/app/prog":            {needed: []string{"libfoo.so.1"}, rpath: "$ORIGIN/lib"},
				"/opt/app/lib/libfoo.so.1": leaf,
			},
			programs: []string{"/opt/app/prog"},
			want:     []string{"/opt/app/lib/libfoo.so.1", "/opt/app/prog"},
		},
		{
			// DT_RUNPATH applies to the object's own needs: the program's does not reach its
			// library's, which has its own.
			name: "a run path is its object's own",
			tree: map[string]fakeELF{
				"/usr/bin/prog":                  {needed: []string{"libfoo.so.1", "libplugin.so"}, runpath: "/opt/prog"},
				"/opt/prog/libplugin.so":         leaf,
				multiarch + "/libfoo.so.1":       {needed: []string{"libplugin.so", "libpart.so"}, runpath: "$ORIGIN/foo"},
				multiarch + "/foo/libpart.so":    leaf,
				"/usr/lib/libplugin.so":          leaf,
				"/usr/lib/x86_64-linux-gnu/x.so": leaf,
			},
			programs: []string{"/usr/bin/prog"},
			want:     []string{"/opt/prog/libplugin.so", "/usr/bin/prog", multiarch + "/foo/libpart.so", multiarch + "/libfoo.so.1", "/usr/lib/libplugin.so"},
		},
		{
			name: "transitive, each once, a cycle ends",
			tree: map[string]fakeELF{
				"/usr/bin/a":             {needed: []string{"liba.so", "libb.so"}},
				"/usr/bin/b":             {needed: []string{"libb.so"}},
				multiarch + "/liba.so":   {needed: []string{"libb.so"}},
				multiarch + "/libb.so":   {needed: []string{"liba.so"}},
				multiarch + "/libc.so.1": leaf,
			},
			programs: []string{"/usr/bin/a", "/usr/bin/b"},
			want:     []string{"/usr/bin/a", "/usr/bin/b", multiarch + "/liba.so", multiarch + "/libb.so"},
		},
		{
			name: "the default directories in order: /lib's only when /usr/lib has none",
			tree: map[string]fakeELF{
				"/usr/bin/prog":                     {needed: []string{"libfoo.so.1", "libbar.so.1"}},
				"/lib/x86_64-linux-gnu/libfoo.so.1": leaf,
				multiarch + "/libfoo.so.1":          leaf,
				"/lib/x86_64-linux-gnu/libbar.so.1": leaf,
			},
			programs: []string{"/usr/bin/prog"},
			want:     []string{"/lib/x86_64-linux-gnu/libbar.so.1", "/usr/bin/prog", multiarch + "/libfoo.so.1"},
		},
		{
			name: "other library directories",
			tree: map[string]fakeELF{
				"/usr/bin/prog":          {needed: []string{"libfoo.so.1"}},
				"/usr/lib64/libfoo.so.1": leaf,
			},
			programs: []string{"/usr/bin/prog"},
			libDirs:  []string{"/usr/lib64"},
			want:     []string{"/usr/bin/prog", "/usr/lib64/libfoo.so.1"},
		},
		{
			name: "a needed path",
			tree: map[string]fakeELF{
				"/usr/bin/prog":          {needed: []string{"/opt/lib/libfoo.so"}},
				"/opt/lib/libfoo.so":     leaf,
				multiarch + "/libfoo.so": leaf,
			},
			programs: []string{"/usr/bin/prog"},
			want:     []string{"/opt/lib/libfoo.so", "/usr/bin/prog"},
		},
		{
			name: "dlopen: the first alternative found, and what it needs",
			tree: map[string]fakeELF{
				"/usr/lib/systemd/systemd-udevd": {dlopen: [][]string{{"libkmod.so.3", "libkmod.so.2"}, {"libzstd.so.1"}}},
				multiarch + "/libkmod.so.2":      {needed: []string{"libzstd.so.1"}},
				multiarch + "/libkmod.so.1":      leaf,
				multiarch + "/libzstd.so.1":      leaf,
			},
			programs: []string{"/usr/lib/systemd/systemd-udevd"},
			want:     []string{"/usr/lib/systemd/systemd-udevd", multiarch + "/libkmod.so.2", multiarch + "/libzstd.so.1"},
		},
		{
			name: "dlopen: a feature the tree lacks is left out",
			tree: map[string]fakeELF{
				"/usr/bin/kmod":             {dlopen: [][]string{{"liblzma.so.5"}, {"libzstd.so.1"}}},
				multiarch + "/libzstd.so.1": leaf,
			},
			programs: []string{"/usr/bin/kmod"},
			want:     []string{"/usr/bin/kmod", multiarch + "/libzstd.so.1"},
		},
		{
			name: "dlopen: a library found that needs one missing is an error",
			tree: map[string]fakeELF{
				"/usr/bin/kmod":             {dlopen: [][]string{{"libzstd.so.1"}}},
				multiarch + "/libzstd.so.1": {needed: []string{"libmissing.so.1"}},
			},
			programs: []string{"/usr/bin/kmod"},
			err:      []string{"libzstd.so.1 needs libmissing.so.1"},
		},
		{
			name:     "dlopen: a broken note",
			tree:     map[string]fakeELF{"/usr/bin/kmod": {dlopen: [][]string{{"libzstd.so.1"}}, brokenDlopenSec: true}},
			programs: []string{"/usr/bin/kmod"},
			err:      []string{"/usr/bin/kmod's dlopen notes", "truncated note"},
		},
		{
			name: "a missing library names it and who needs it",
			tree: map[string]fakeELF{
				"/usr/bin/prog":            {needed: []string{"libfoo.so.1"}},
				multiarch + "/libfoo.so.1": {needed: []string{"libbar.so.1"}},
			},
			programs: []string{"/usr/bin/prog"},
			err:      []string{"libfoo.so.1 needs libbar.so.1", "not found"},
		},
		{
			name:     "an interpreter missing",
			tree:     map[string]fakeELF{"/usr/bin/prog": {interp: "/lib/ld-musl-x86_64.so.1"}},
			programs: []string{"/usr/bin/prog"},
			err:      []string{"/usr/bin/prog's interpreter", "/usr/lib/ld-musl-x86_64.so.1"},
		},
		{
			// An installed system's links to directories are listed, the directories not:
			// a copy of the list would copy them whole.
			name: "links to directories",
			tree: map[string]fakeELF{
				"/usr/bin/prog":                           {interp: "/lib64/ld.so", needed: []string{"libfoo.so.1"}},
				"/usr/lib/ld.so":                          leaf,
				"/usr/lib/x86_64-linux-gnu/foo":           leaf,
				"/usr/lib/x86_64-linux-gnu/libfoo.so.1.0": leaf,
			},
			links: map[string]string{
				"/lib64": "usr/lib", "/lib": "usr/lib", "/usr/lib/x86_64-linux-gnu/libfoo.so.1": "/lib/x86_64-linux-gnu/libfoo.so.1.0",
			},
			programs: []string{"/usr/bin/prog"},
			want: []string{
				"/lib", "/lib64", "/usr/bin/prog", "/usr/lib/ld.so", "/usr/lib/x86_64-linux-gnu/libfoo.so.1",
				"/usr/lib/x86_64-linux-gnu/libfoo.so.1.0",
			},
		},
		{
			name:     "a directory where a library is looked for first",
			tree:     map[string]fakeELF{"/usr/bin/prog": {needed: []string{"libfoo.so.1"}}, "/usr/lib/libfoo.so.1": leaf},
			links:    map[string]string{"/usr/lib/x86_64-linux-gnu/libfoo.so.1/x": "y"},
			programs: []string{"/usr/bin/prog"},
			want:     []string{"/usr/bin/prog", "/usr/lib/libfoo.so.1"},
		},
		{
			name:     "a directory link into itself",
			tree:     map[string]fakeELF{"/usr/bin/prog": {interp: "/opt/a/ld.so"}},
			links:    map[string]string{"/opt/a": "/opt/a/b"},
			programs: []string{"/usr/bin/prog"},
			err:      []string{"/usr/bin/prog's interpreter", "too many links"},
		},
		{
			name:     "a link loop",
			tree:     map[string]fakeELF{"/usr/bin/prog": {needed: []string{"libloop.so"}}},
			links:    map[string]string{"/usr/lib/libloop.so": "libloop.so"},
			programs: []string{"/usr/bin/prog"},
			err:      []string{"/usr/bin/prog needs libloop.so", "not found"},
		},
		{
			name: "an interpreter found under /usr",
			tree: map[string]fakeELF{
				"/usr/bin/prog":                {interp: "/lib/ld-musl-x86_64.so.1"},
				"/usr/lib/ld-musl-x86_64.so.1": leaf,
			},
			programs: []string{"/usr/bin/prog"},
			want:     []string{"/usr/bin/prog", "/usr/lib/ld-musl-x86_64.so.1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			root := t.TempDir()

			for p, e := range tc.tree {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(root, p), e.bytes(t), 0o755))
			}

			for p, target := range tc.links {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
				require.NoError(t, os.Symlink(target, filepath.Join(root, p)))
			}

			files, err := Closure(root, tc.programs, tc.libDirs)
			if tc.err != nil {
				require.Error(t, err)

				for _, s := range tc.err {
					assert.ErrorContains(t, err, s)
				}

				return
			}

			require.NoError(t, err)
			assert.Equal(t, sorted(tc.want), files)
		})
	}
}

// TestClosureNotELF: a program that is not ELF is an error naming it.
func TestClosureNotELF(t *testing.T) {
	t.Parallel()

	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr", "bin", "script"), []byte("#!/bin/sh\n"), 0o755))

	_, err := Closure(root, []string{"/usr/bin/script"}, nil)
	assert.ErrorContains(t, err, "error reading /usr/bin/script as ELF")
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }
