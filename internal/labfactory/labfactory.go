// Package labfactory is a local stand-in for the Image Factory, for the lab, tests and
// benchmarks (the real one cannot be reached from them): it registers schematics as the
// factory's POST /schematics does, answering with the schematic's content-addressed ID,
// and serves the factory's iPXE script (GET /pxe/<schematic>/<version>/<platform>-<arch>),
// boot assets (GET /image/<schematic>/<version>/{kernel-amd64,initramfs-amd64.xz})
// and raw disk image (.../metal-amd64.raw, what Talos installs itself from) from a
// directory of its own: a kernel, the test "Talos" initramfs and a disk booting them;
// and the kernel cmdline of a platform (.../cmdline-<platform>-<arch>), the one its PXE
// script boots with. It counts the image downloads it served (Downloads).
// For Omni it also lists the Talos versions (GET /versions,
// /version/<v>/{extensions,overlays}/official) and, as a container registry would, the
// Kubernetes versions (GET /v2/ and /v2/siderolabs/kubelet/tags/list): versions.go.
package labfactory

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/siderolabs/image-factory/pkg/schematic"
)

// maxSchematic bounds a schematic document.
const maxSchematic = 1 << 20

// BaseCmdline is what the stand-in puts on every kernel line before its own and the
// schematic's arguments, as the factory puts Talos' defaults for the platform; and
// no_timer_check, since the lab's machines are emulated (TCG) and on a loaded host the
// timer interrupt can miss the kernel's IO-APIC timer check, which then panics.
const BaseCmdline = "console=ttyS0,115200n8 console=tty0 no_timer_check"

// BaseCmdlineARM64 is BaseCmdline on arm64, whose serial port is a PL011.
const BaseCmdlineARM64 = "console=ttyAMA0,115200n8 console=tty0 no_timer_check"

// Kernel arguments naming what the stand-in served, so the test "Talos" can report
// exactly what it was booted as.
const (
	SchematicArg = "anvil.lab.schematic"
	VersionArg   = "anvil.lab.version"
)

// InstalledArg is on the kernel line of the stand-in's disk image: the stand-in booted
// from the machine's disk, as installed Talos.
const InstalledArg = "anvil.lab.installed"

// DiskImage is the factory's name for the amd64 raw metal disk image, and the file
// served as it.
const DiskImage = "metal-amd64.raw"

// DiskImageFor is the factory's name for an architecture's raw metal disk image.
func DiskImageFor(arch string) string { return "metal-" + arch + ".raw" }

// assetFallbacks are the imager's names for the factory's files, so the imager's
// output directory can be served as it is (the kernel reads a zstd initramfs whatever
// its name says); an arm64 stand-in's files sit beside the amd64 one's.
var assetFallbacks = map[string][]string{
	"kernel-amd64":        {"kernel-amd64", "vmlinuz-amd64"},
	"initramfs-amd64.xz":  {"initramfs-amd64.xz", "initramfs-amd64.zst"},
	DiskImage:             {DiskImage},
	"kernel-arm64":        {"kernel-arm64", "vmlinuz-arm64"},
	"initramfs-arm64.xz":  {"initramfs-arm64.xz", "initramfs-arm64.zst"},
	DiskImageFor("arm64"): {DiskImageFor("arm64")},
}

var (
	versionRe  = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$`)
	platformRe = regexp.MustCompile(`^([a-z0-9]+)-(amd64|arm64)$`)
	cmdlineRe  = regexp.MustCompile(`^cmdline-([a-z0-9]+)-(amd64|arm64)$`)
)

// Factory is the stand-in's handler.
type Factory struct {
	assets  string
	baseURL string

	talosVersions, kubernetesVersions []string

	// talos is real Talos, served for its version (WithTalos); the stand-in's assets
	// serve the others.
	talos *Talos

	mu         sync.Mutex
	schematics map[string][]byte
	order      []string
	// downloads counts the completed GETs of /image/ files, by URL path.
	downloads map[string]int
}

// Option configures a Factory.
type Option func(*Factory)

// WithAssets serves the boot assets from dir: kernel-amd64 (or vmlinuz-amd64),
// initramfs-amd64.xz (or initramfs-amd64.zst) and metal-amd64.raw. Without it /image/
// answers 404.
func WithAssets(dir string) Option { return func(f *Factory) { f.assets = dir } }

// WithBaseURL sets the base of the asset URLs in the PXE script; without it they are
// built from the request's Host, which is what the client reached the factory at.
func WithBaseURL(u string) Option {
	return func(f *Factory) { f.baseURL = strings.TrimRight(u, "/") }
}

// New returns an empty factory.
func New(opts ...Option) *Factory {
	f := &Factory{
		schematics:         map[string][]byte{},
		downloads:          map[string]int{},
		talosVersions:      DefaultTalosVersions,
		kubernetesVersions: DefaultKubernetesVersions,
	}

	for _, o := range opts {
		o(f)
	}

	return f
}

// ServeHTTP implements the factory's schematic, PXE, image and version endpoints, and
// the registry's tag lists.
func (f *Factory) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	get := r.Method == http.MethodGet || r.Method == http.MethodHead

	switch {
	case r.URL.Path == "/schematics" && r.Method == http.MethodPost:
		f.register(w, r)
	case strings.HasPrefix(r.URL.Path, "/schematics/") && get:
		f.schematicDoc(w, r)
	case r.URL.Path == "/versions" && get:
		f.versions(w, r)
	case strings.HasPrefix(r.URL.Path, "/version/") && get:
		f.officialList(w, r)
	case isRegistryPath(r.URL.Path) && get:
		f.registry(w, r)
	case strings.HasPrefix(r.URL.Path, "/pxe/") && get:
		f.pxe(w, r)
	case strings.HasPrefix(r.URL.Path, "/image/") && get:
		f.image(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (f *Factory) register(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxSchematic))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	sc, err := schematic.Unmarshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	id, err := sc.ID()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	f.mu.Lock()
	if _, ok := f.schematics[id]; !ok {
		f.order = append(f.order, id)
	}

	f.schematics[id] = body
	f.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"id": id, "schematic": string(body)}) //nolint:errcheck,errchkjson // the client went away: nothing to do
}

// schematicDoc answers GET /schematics/<id> with the schematic's document: the
// manifest a factory image carries as its schematic extension's, which the stand-in
// Talos reports as real Talos does (Omni reads the schematic's kernel args from it).
func (f *Factory) schematicDoc(w http.ResponseWriter, r *http.Request) {
	doc, ok := f.Schematic(strings.TrimPrefix(r.URL.Path, "/schematics/"))
	if !ok {
		http.Error(w, "unknown schematic", http.StatusNotFound)

		return
	}

	w.Header().Set("Content-Type", "application/yaml")
	w.Write(doc) //nolint:errcheck,gosec // a registered schematic's YAML, served as application/yaml
}

// pxe answers GET /pxe/<schematic>/<version>/<platform>-<arch> with the factory's script.
func (f *Factory) pxe(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/pxe/"), "/")
	if len(parts) != 3 || parts[0] == "" || !versionRe.MatchString(parts[1]) {
		http.Error(w, "want /pxe/<schematic>/<version>/<platform>-<arch>", http.StatusBadRequest)

		return
	}

	m := platformRe.FindStringSubmatch(parts[2])
	if m == nil {
		http.Error(w, "want <platform>-<arch> with arch amd64 or arm64, not "+parts[2], http.StatusBadRequest)

		return
	}

	id, version, platform, arch := parts[0], parts[1], m[1], m[2]

	sc, err := f.parsed(id)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)

		return
	}

	base := f.base(r)
	image := base + "/image/" + id + "/" + version + "/"
	initramfs := "initramfs-" + arch + ".xz"

	cmdline, err := f.cmdline(sc, id, version, platform, arch, base)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	w.Header().Set("Content-Type", "text/plain")
	// Debian's 2019 iPXE needs initrd=<name> on the kernel line under EFI.
	fmt.Fprintf(w, "#!ipxe\nimgfree\nkernel %skernel-%s initrd=%s %s\ninitrd %s%s\nboot\n", image, arch, initramfs, cmdline, image, initramfs) //nolint:gosec // a text/plain iPXE script, not HTML
}

// cmdline is a schematic's kernel command line for a version: the real factory's for real
// Talos, the stand-in's own (naming what it served) for the stand-in.
func (f *Factory) cmdline(sc *schematic.Schematic, id, version, platform, arch, base string) (string, error) {
	if f.talos.serves(version) {
		return TalosCmdline(version, platform, arch, sc.Customization.ExtraKernelArgs)
	}

	return strings.Join(kernelArgs(sc, id, version, platform, arch, base), " "), nil
}

// kernelArgs are the arguments the stand-in boots a schematic's Talos with, as the
// factory's cmdline-<platform>-<arch>: the platform, Talos' defaults (BaseCmdline, its
// serial console the arm64 one on arm64), what the stand-in served, then the
// schematic's extra kernel arguments as they are.
func kernelArgs(sc *schematic.Schematic, id, version, platform, arch, base string) []string {
	cmdline := BaseCmdline
	if arch == "arm64" {
		cmdline = BaseCmdlineARM64
	}

	return append([]string{
		"talos.platform=" + platform, cmdline,
		SchematicArg + "=" + id, VersionArg + "=" + version, FactoryArg + "=" + base,
	}, sc.Customization.ExtraKernelArgs...)
}

// base is the factory's base URL as its clients reach it.
func (f *Factory) base(r *http.Request) string {
	if f.baseURL != "" {
		return f.baseURL
	}

	return "http://" + r.Host
}

// image answers GET /image/<schematic>/<version>/<file> from the assets directory.
func (f *Factory) image(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/image/"), "/")
	if len(parts) != 3 || parts[0] == "" || !versionRe.MatchString(parts[1]) {
		http.Error(w, "want /image/<schematic>/<version>/<file>", http.StatusBadRequest)

		return
	}

	sc, err := f.parsed(parts[0])
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)

		return
	}

	// Every answer below is counted once sent: tests assert how often each file was
	// fetched.
	cw := &countingWriter{ResponseWriter: w}
	defer f.count(r, cw)

	if m := cmdlineRe.FindStringSubmatch(parts[2]); m != nil {
		cmdline, err := f.cmdline(sc, parts[0], parts[1], m[1], m[2], f.base(r))
		if err != nil {
			http.Error(cw, err.Error(), http.StatusBadRequest)

			return
		}

		cw.Header().Set("Content-Type", "text/plain")
		io.WriteString(cw, cmdline) //nolint:errcheck,gosec // a text/plain cmdline, not HTML; a write error: the client went away

		return
	}

	if f.talos.serves(parts[1]) {
		path, err := f.talos.file(r.Context(), parts[0], sc, f.base(r), parts[2])

		switch {
		case err != nil:
			http.Error(cw, err.Error(), http.StatusInternalServerError)
		case path == "":
			http.NotFound(cw, r)
		default:
			cw.Header().Set("Content-Type", "application/octet-stream")
			http.ServeFile(cw, r, path) //nolint:gosec // a path of make talos' output or the factory's work dir, for a registered schematic ID
		}

		return
	}

	names, ok := assetFallbacks[parts[2]]
	if !ok || f.assets == "" {
		http.NotFound(cw, r)

		return
	}

	for _, name := range names {
		path := filepath.Join(f.assets, name)
		if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() { //nolint:gosec // the assets directory joined with a fixed name from assetFallbacks
			cw.Header().Set("Content-Type", "application/octet-stream")
			http.ServeFile(cw, r, path) //nolint:gosec // the assets directory joined with a fixed name from assetFallbacks

			return
		}
	}

	http.NotFound(cw, r)
}

// countingWriter remembers the status of an answer, and whether it was sent whole.
type countingWriter struct {
	http.ResponseWriter

	status int
	broken bool
}

func (w *countingWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}

	w.ResponseWriter.WriteHeader(status)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}

	n, err := w.ResponseWriter.Write(b)
	w.broken = w.broken || err != nil

	return n, err //nolint:wrapcheck // the connection's own error, as http.ResponseWriter's
}

// ReadFrom keeps the writer's own ReadFrom (sendfile) for http.ServeFile.
func (w *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}

	n, err := io.Copy(w.ResponseWriter, r)
	w.broken = w.broken || err != nil

	return n, err //nolint:wrapcheck // the connection's own error, as http.ResponseWriter's
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// count records a completed download: a GET (not HEAD) answered with success, whole.
func (f *Factory) count(r *http.Request, w *countingWriter) {
	if r.Method != http.MethodGet || w.status < 200 || w.status > 299 || w.broken {
		return
	}

	f.mu.Lock()
	f.downloads[r.URL.Path]++
	f.mu.Unlock()
}

// Downloads is how many times the /image/ file at path (/image/<schematic>/<version>/<file>)
// was downloaded: completed GETs answered with success, HEADs not counted.
func (f *Factory) Downloads(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()

	return f.downloads[path]
}

// parsed returns a registered schematic, decoded.
func (f *Factory) parsed(id string) (*schematic.Schematic, error) {
	doc, ok := f.Schematic(id)
	if !ok {
		return nil, fmt.Errorf("unknown schematic %s", id)
	}

	sc, err := schematic.Unmarshal(doc)
	if err != nil {
		return nil, fmt.Errorf("error decoding schematic %s: %w", id, err)
	}

	return sc, nil
}

// Registered lists the schematic IDs registered, in the order first seen.
func (f *Factory) Registered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()

	return slices.Clone(f.order)
}

// Schematic returns a registered schematic's document.
func (f *Factory) Schematic(id string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()

	b, ok := f.schematics[id]

	return b, ok
}
