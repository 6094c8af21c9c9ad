package labfactory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/siderolabs/image-factory/pkg/schematic"

	"github.com/anvil-metal/anvil/internal/installerimage"
	"github.com/anvil-metal/anvil/internal/talosext"
	"github.com/anvil-metal/anvil/internal/uki"
)

// The real Talos assets' names in make talos' output (imager/internal/talosbuild).
const (
	talosKernel        = "vmlinuz-amd64"
	talosInitramfs     = "initramfs-amd64.xz"
	talosInstallerBase = "installer-base.tar"
	talosUKIStub       = "uki-stub-amd64.efi"
	talosOSRelease     = "os-release"
	talosManifest      = "talos.json"
)

// Talos is real Talos (make talos) served for its version, as the Image Factory serves a
// release: the kernel, an initramfs per schematic (Talos' own with the schematic's
// extension layer appended, so that Talos reports the schematic as a factory image's
// does), the factory's kernel command line, and installer images in the registry:
// metal-installer/<schematic>:<version> and siderolabs/installer:<version>.
type Talos struct {
	dir, work string
	version   string
	// extensions are system extensions by name that schematics may ask for
	// (WithExtension): their rootfs directories.
	extensions map[string]talosext.Extension

	reg   http.Handler
	blobs *blobStore

	mu sync.Mutex
	// initramfs are the per-schematic initramfs files made, by schematic ID.
	initramfs map[string]string
	// pushed are the installer images in the registry, by reference path.
	pushed map[string]bool
}

// NewTalos serves make talos' output in dir; per-schematic files are made under work.
func NewTalos(dir, work string) (*Talos, error) {
	b, err := os.ReadFile(filepath.Join(dir, talosManifest))
	if err != nil {
		return nil, fmt.Errorf("error reading real Talos' manifest (make talos): %w", err)
	}

	var m struct {
		TalosVersion string `json:"talosVersion"`
	}

	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("error decoding %s: %w", talosManifest, err)
	}

	if !versionRe.MatchString(m.TalosVersion) {
		return nil, fmt.Errorf("%s names no Talos version", talosManifest)
	}

	for _, f := range []string{talosKernel, talosInitramfs, talosInstallerBase, talosUKIStub, talosOSRelease} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return nil, fmt.Errorf("real Talos' %s (make talos): %w", f, err)
		}
	}

	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("error making %s: %w", work, err)
	}

	blobs := &blobStore{files: map[string]string{}, data: map[string][]byte{}}

	return &Talos{
		dir: dir, work: work, version: m.TalosVersion,
		extensions: map[string]talosext.Extension{},
		reg:        registry.New(registry.WithBlobHandler(blobs), registry.Logger(log.New(io.Discard, "", 0))),
		blobs:      blobs,
		initramfs:  map[string]string{}, pushed: map[string]bool{},
	}, nil
}

// Version is the Talos version served.
func (t *Talos) Version() string { return t.version }

// WithExtension lets schematics name ext among their official extensions.
func (t *Talos) WithExtension(name string, ext talosext.Extension) {
	t.mu.Lock()
	defer t.mu.Unlock()

	t.extensions[name] = ext
}

// WithTalos serves real Talos for its version beside the stand-in's versions.
func WithTalos(t *Talos) Option {
	return func(f *Factory) {
		f.talos = t

		if !containsString(f.talosVersions, t.version) {
			f.talosVersions = append(f.talosVersions, t.version)
		}
	}
}

// serves says whether version is real Talos'.
func (t *Talos) serves(version string) bool { return t != nil && version == t.version }

// file answers a real Talos /image/ file: the kernel, the schematic's initramfs, the
// cmdline; "" when there is none by that name.
func (t *Talos) file(ctx context.Context, id string, sc *schematic.Schematic, base, file string) (string, error) {
	switch file {
	case "kernel-amd64":
		return filepath.Join(t.dir, talosKernel), nil
	case "initramfs-amd64.xz":
		return t.schematicInitramfs(ctx, id, sc, base)
	default:
		return "", nil
	}
}

// schematicInitramfs is Talos' initramfs with the schematic's extensions appended, made
// once per schematic.
func (t *Talos) schematicInitramfs(ctx context.Context, id string, sc *schematic.Schematic, base string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()

	if p, ok := t.initramfs[id]; ok {
		return p, nil
	}

	doc, err := sc.Marshal()
	if err != nil {
		return "", fmt.Errorf("error encoding schematic %s: %w", id, err)
	}

	exts := []talosext.Extension{talosext.Schematic(id, doc, base)}

	for _, name := range sc.Customization.SystemExtensions.OfficialExtensions {
		ext, ok := t.extensions[name]
		if !ok {
			return "", fmt.Errorf("the factory stand-in has no extension %s", name)
		}

		exts = append(exts, ext)
	}

	dir := filepath.Join(t.work, id)
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // under the work dir, named by a registered schematic ID (64 hex digits)
		return "", fmt.Errorf("error making %s: %w", dir, err)
	}

	out := filepath.Join(dir, talosInitramfs)

	if err := appendFile(out, filepath.Join(t.dir, talosInitramfs), func(w io.Writer) error {
		return talosext.Layer(ctx, w, exts, dir, time.Unix(0, 0))
	}); err != nil {
		return "", fmt.Errorf("error making schematic %s's initramfs: %w", id, err)
	}

	t.initramfs[id] = out

	return out, nil
}

// appendFile writes out as src (if any) followed by what more writes, atomically.
func appendFile(out, src string, more func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+"-*")
	if err != nil {
		return err //nolint:wrapcheck // names the file
	}

	defer os.Remove(tmp.Name())

	if src != "" {
		in, err := os.Open(src) //nolint:gosec // make talos' initramfs or a file this factory made
		if err != nil {
			tmp.Close()

			return err //nolint:wrapcheck // names the file
		}

		_, err = io.Copy(tmp, in)
		in.Close()

		if err != nil {
			tmp.Close()

			return err //nolint:wrapcheck // names the file
		}
	}

	err = more(tmp)

	if cerr := tmp.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		return err
	}

	return os.Rename(tmp.Name(), out) //nolint:wrapcheck,gosec // under the work dir, named by a registered schematic ID
}

// Registry paths of the installer images: Omni names Talos ≥ 1.10's installer
// <factory>/<platform>-installer/<schematic>:<version>; without a schematic,
// siderolabs/installer:<version>.
var installerManifestRe = regexp.MustCompile(`^/v2/(metal-installer/([0-9a-f]{64})|siderolabs/installer)/manifests/([^/]+)$`)

// registry answers the distribution API for the installer images, pushing an image into
// the in-process registry when its manifest is first asked for (an unknown schematic's is
// not found).
func (t *Talos) registry(w http.ResponseWriter, r *http.Request, f *Factory) {
	// The registry slices a tag list by its page size unchecked: a negative n panics it.
	// Any path whose next to last element is "tags" is a tag list to it, /tags/list or not.
	if ns := r.URL.Query().Get("n"); ns != "" {
		if n, err := strconv.Atoi(ns); err != nil || n < 0 {
			registryError(w, http.StatusBadRequest, "PAGINATION_NUMBER_INVALID", "invalid number of results requested")

			return
		}
	}

	if m := installerManifestRe.FindStringSubmatch(r.URL.Path); m != nil && m[3] == t.version {
		// A schematic never registered has no installer, as the factory answers.
		if m[2] != "" {
			if _, ok := f.Schematic(m[2]); !ok {
				registryError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "unknown schematic "+m[2])

				return
			}
		}

		if err := t.ensureInstaller(r.Context(), f, m[1], m[2], f.base(r)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)

			return
		}
	}

	t.reg.ServeHTTP(w, r)
}

// ensureInstaller pushes the installer image repo:<version> with the schematic id's boot
// assets (Talos' own without one).
func (t *Talos) ensureInstaller(ctx context.Context, f *Factory, repo, id, base string) error {
	ref := repo + ":" + t.version

	t.mu.Lock()
	done := t.pushed[ref]
	t.mu.Unlock()

	if done {
		return nil
	}

	sc := &schematic.Schematic{}
	dir := filepath.Join(t.work, "installer")

	if id != "" {
		var err error
		if sc, err = f.parsed(id); err != nil {
			return err
		}

		dir = filepath.Join(t.work, id)
	}

	uki, err := t.schematicUKI(ctx, id, sc, base, dir)
	if err != nil {
		return err
	}

	img, err := installerimage.Image(filepath.Join(t.dir, talosInstallerBase),
		installerimage.Assets{Arch: "amd64", UKI: uki}, filepath.Join(dir, "installer"), time.Unix(0, 0))
	if err != nil {
		return err //nolint:wrapcheck // names what failed
	}

	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("error reading the installer's layers: %w", err)
	}

	for _, l := range layers {
		t.blobs.addLayer(l)
	}

	tag, err := name.NewTag("factory.lab/"+ref, name.Insecure)
	if err != nil {
		return fmt.Errorf("error naming %s: %w", ref, err)
	}

	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithTransport(handlerTransport{t.reg})); err != nil {
		return fmt.Errorf("error storing %s in the registry: %w", ref, err)
	}

	t.mu.Lock()
	t.pushed[ref] = true
	t.mu.Unlock()

	return nil
}

// schematicUKI is the schematic's Unified Kernel Image, as the factory's installer for
// Talos ≥ 1.10 carries it (vmlinuz.efi): the kernel, the schematic's initramfs (Talos'
// own without a schematic) and its command line, made once in dir.
func (t *Talos) schematicUKI(ctx context.Context, id string, sc *schematic.Schematic, base, dir string) (string, error) {
	out := filepath.Join(dir, "vmlinuz.efi")
	if _, err := os.Stat(out); err == nil { //nolint:gosec // under the work dir, named by a registered schematic ID
		return out, nil
	}

	initramfs := filepath.Join(t.dir, talosInitramfs)

	if id != "" {
		var err error
		if initramfs, err = t.schematicInitramfs(ctx, id, sc, base); err != nil {
			return "", err
		}
	}

	cmdline, err := TalosCmdline(t.version, "metal", "amd64", sc.Customization.ExtraKernelArgs)
	if err != nil {
		return "", err
	}

	stub, err := os.ReadFile(filepath.Join(t.dir, talosUKIStub)) //nolint:gosec // make talos' output, a fixed name
	if err != nil {
		return "", fmt.Errorf("error reading the UKI stub: %w", err)
	}

	osrel, err := os.ReadFile(filepath.Join(t.dir, talosOSRelease)) //nolint:gosec // make talos' output, a fixed name
	if err != nil {
		return "", fmt.Errorf("error reading os-release: %w", err)
	}

	var sections []uki.Section

	for _, s := range []struct{ name, path string }{{uki.SectionLinux, filepath.Join(t.dir, talosKernel)}, {uki.SectionInitrd, initramfs}} {
		f, err := os.Open(s.path)
		if err != nil {
			return "", fmt.Errorf("error opening %s: %w", s.path, err)
		}

		defer f.Close()

		st, err := f.Stat()
		if err != nil {
			return "", fmt.Errorf("error reading %s: %w", s.path, err)
		}

		sections = append(sections, uki.Section{Name: s.name, Data: f, Size: st.Size()})
	}

	im, err := uki.New(stub, append([]uki.Section{
		uki.BytesSection(uki.SectionOSRel, osrel), uki.BytesSection(uki.SectionCmdline, []byte(cmdline)),
	}, sections...)...)
	if err != nil {
		return "", err //nolint:wrapcheck // names the UKI
	}

	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // under the work dir, named by a registered schematic ID
		return "", fmt.Errorf("error making %s: %w", dir, err)
	}

	if err := appendFile(out, "", func(w io.Writer) error {
		_, err := io.Copy(w, io.NewSectionReader(im, 0, im.Size()))

		return err //nolint:wrapcheck // names the file below
	}); err != nil {
		return "", fmt.Errorf("error writing the UKI: %w", err)
	}

	return out, nil
}

// handlerTransport sends requests to an in-process handler.
type handlerTransport struct{ h http.Handler }

func (ht handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil {
		r.Body = http.NoBody // a server's request always has one
	}

	rec := httptest.NewRecorder()
	ht.h.ServeHTTP(rec, r)

	res := rec.Result()
	res.Request = r // the client resolves upload locations against it

	return res, nil
}

// maxPutBlob bounds a blob pushed into the registry: image configs and manifests are a few
// KiB; the layers are files on disk, never pushed.
const maxPutBlob = 1 << 20

// blobStore keeps the registry's blobs: layers as the files they are on disk, the rest
// (image configs) in memory.
type blobStore struct {
	mu    sync.Mutex
	files map[string]string
	data  map[string][]byte
}

func (b *blobStore) addLayer(l v1.Layer) {
	fl, ok := l.(interface{ Path() string })
	if !ok {
		return
	}

	d, err := l.Digest()
	if err != nil {
		return
	}

	b.mu.Lock()
	b.files[d.String()] = fl.Path()
	b.mu.Unlock()
}

func (b *blobStore) Stat(_ context.Context, _ string, h v1.Hash) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	if p, ok := b.files[h.String()]; ok {
		st, err := os.Stat(p)
		if err != nil {
			return 0, err //nolint:wrapcheck // the registry answers with it
		}

		return st.Size(), nil
	}

	if d, ok := b.data[h.String()]; ok {
		return int64(len(d)), nil
	}

	return 0, registry.ErrNotFound
}

func (b *blobStore) Get(_ context.Context, _ string, h v1.Hash) (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	if p, ok := b.files[h.String()]; ok {
		return os.Open(p) //nolint:wrapcheck // a layer file this factory made
	}

	if d, ok := b.data[h.String()]; ok {
		return io.NopCloser(strings.NewReader(string(d))), nil
	}

	return nil, registry.ErrNotFound
}

func (b *blobStore) Put(_ context.Context, _ string, h v1.Hash, rc io.ReadCloser) error {
	defer rc.Close()

	d, err := io.ReadAll(io.LimitReader(rc, maxPutBlob+1))
	if err != nil {
		return err //nolint:wrapcheck // the registry answers with it
	}

	if len(d) > maxPutBlob {
		return errors.New("blob too large for the factory stand-in")
	}

	b.mu.Lock()
	b.data[h.String()] = d
	b.mu.Unlock()

	return nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}

	return false
}
