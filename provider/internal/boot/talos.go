package boot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/earlyconfig"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// AssetCache keeps the Image Factory's Talos boot assets (imagecache.Cache): each
// fetched from the factory once, then served by the provider.
type AssetCache interface {
	Get(ctx context.Context, k imagecache.Key) (imagecache.Blob, error)
}

// scriptWait bounds how long a Talos boot script waits for its assets.
const scriptWait = 20 * time.Second

// maxKernelLine is Linux's COMMAND_LINE_SIZE on x86 and arm64, its terminating NUL
// included: what lies past it is dropped without a word, and a Talos without its
// talos.config= (the last of the boot's arguments) would wait in maintenance for ever.
const maxKernelLine = 2048

// maxCmdline bounds a cached cmdline read: Linux takes at most a few KiB.
const maxCmdline = 64 << 10

// TalosBoot is how an allocation's Talos boots from the provider's cache: the URLs of
// its kernel and initramfs with their SHA-256 digests (hex), and the factory's cmdline
// for the schematic.
type TalosBoot struct {
	KernelURL, InitramfsURL       string
	KernelSHA256, InitramfsSHA256 string
	Initramfs                     string
	// Cmdline is the factory's: the platform, Talos' defaults and the schematic's kernel
	// arguments, which every boot of it gets, installed ones included. It holds nothing of
	// one machine's: the boot's own arguments (bootArgs) follow it on the kernel line.
	Cmdline string
	// KernelPath and InitramfsPath are the cached files, for a UKI built of them.
	KernelPath, InitramfsPath string
}

// talosImage is one Talos the provider boots: a schematic at a version, and how the
// Image Factory learns the schematic when it answers 404 for it (nil: it is not told).
type talosImage struct {
	schematic, version string
	register           func(ctx context.Context) error
}

// allocationImage is the allocation's Talos; RegisterSchematic registers its schematic.
func (s *Scripts) allocationImage(machineID string, alloc *resources.Allocation) talosImage {
	img := talosImage{schematic: alloc.SchematicID, version: alloc.TalosVersion}

	if s.RegisterSchematic != nil {
		img.register = func(ctx context.Context) error { return s.RegisterSchematic(ctx, machineID, alloc) }
	}

	return img
}

// TalosBoot makes the allocation's Talos boot assets ready in the cache (fetched from
// the factory at most once, however many machines ask at the same time) and says how
// they boot.
func (s *Scripts) TalosBoot(ctx context.Context, machineID string, alloc *resources.Allocation, arch string) (TalosBoot, error) {
	return s.talosBoot(ctx, s.allocationImage(machineID, alloc), arch)
}

// talosBoot makes img's boot assets for arch ready in the cache and says how they boot.
func (s *Scripts) talosBoot(ctx context.Context, img talosImage, arch string) (TalosBoot, error) {
	if s.Cache == nil {
		return TalosBoot{}, fmt.Errorf("the provider keeps no boot-asset cache")
	}

	files, err := imagecache.FilesFor(arch)
	if err != nil {
		return TalosBoot{}, err
	}

	key := func(file string) imagecache.Key {
		return imagecache.Key{Schematic: img.schematic, Version: img.version, File: file}
	}

	blobs := make(map[string]imagecache.Blob, 3)

	for _, file := range files.All() {
		b, err := s.Cache.Get(ctx, key(file))
		if err != nil && img.register != nil && unknownToFactory(err) {
			// Right after the allocation, the schematic controller may not have
			// registered the schematic yet: register it here and ask again.
			if regErr := img.register(ctx); regErr == nil {
				b, err = s.Cache.Get(ctx, key(file))
			}
		}

		if err != nil {
			return TalosBoot{}, fmt.Errorf("error fetching %s: %w", key(file), err)
		}

		blobs[file] = b
	}

	cmdline, err := readCmdline(blobs[files.Cmdline].Path)
	if err != nil {
		return TalosBoot{}, fmt.Errorf("error reading %s: %w", key(files.Cmdline), err)
	}

	base := s.BaseURL + "/assets/talos/" + img.schematic + "/" + img.version + "/"

	return TalosBoot{
		KernelURL: base + files.Kernel, InitramfsURL: base + files.Initramfs, Initramfs: files.Initramfs,
		KernelSHA256:    strings.TrimPrefix(blobs[files.Kernel].Digest, "sha256:"),
		InitramfsSHA256: strings.TrimPrefix(blobs[files.Initramfs].Digest, "sha256:"),
		Cmdline:         cmdline,
		KernelPath:      blobs[files.Kernel].Path, InitramfsPath: blobs[files.Initramfs].Path,
	}, nil
}

// unknownToFactory says whether the factory answered a fetch with a 404: the asset's
// schematic is not registered with it (or the version does not exist).
func unknownToFactory(err error) bool {
	var fe *imagecache.FactoryStatusError

	return errors.As(err, &fe) && fe.Status == http.StatusNotFound
}

// KexecTarget is what the machine's agent kexecs into to boot the allocation's Talos.
func (s *Scripts) KexecTarget(ctx context.Context, machineID, arch string, alloc *resources.Allocation) (*agentv1.Kexec, error) {
	tb, err := s.TalosBoot(ctx, machineID, alloc, arch)
	if err != nil {
		return nil, err
	}

	cmdline, err := s.KexecCmdline(tb, machineID, alloc)
	if err != nil {
		return nil, err
	}

	return &agentv1.Kexec{
		KernelUrl: tb.KernelURL, KernelSha256: tb.KernelSHA256,
		InitramfsUrl: tb.InitramfsURL, InitramfsSha256: tb.InitramfsSHA256,
		Cmdline: cmdline,
	}, nil
}

// KexecCmdline is the cmdline a kexec into the machine's Talos gets: the one the iPXE
// path boots with (the factory's cmdline then the boot's own arguments), but with the
// kexec kind of metadata token, which no boot script carries.
func (s *Scripts) KexecCmdline(b TalosBoot, machineID string, alloc *resources.Allocation) (string, error) {
	return s.talosCmdline("", b.Cmdline, alloc.TalosVersion, KexecMetadataClaims(machineID, alloc.ID))
}

// bootArgs are the kernel arguments of one boot of the machine's Talos (at talosVersion)
// for the allocation, which the provider adds after the factory's cmdline on every path
// (iPXE from the cache or from the factory, kexec, UKI): the metadata URL with the
// machine's token for the allocation (claims: a boot script's kind, or kexec's) and,
// standalone, the provider's event sink (in Omni mode Omni's sink is among the schematic's
// join arguments). A Talos that reads talos.config.early fetches its configuration over
// HTTPS, trusting the provider's CA that argument gives it (ConfigOverTLS). They are never
// in the schematic (see Schematic): the factory bakes a schematic's arguments into the
// Talos it installs, and an installed Talos must not carry a URL naming one boot's token.
func (s *Scripts) bootArgs(talosVersion string, claims token.Claims) []string {
	base := s.BaseURL

	var args []string

	if s.ConfigOverTLS(talosVersion) {
		base = s.TLSBaseURL
		args = append(args, earlyconfig.Param+"="+s.EarlyConfig)
	}

	args = append(args, "talos.config="+base+"/metadata/"+claims.MachineID+"?token="+s.sign(claims))

	if s.JoinArgs == nil {
		args = append(args, "talos.events.sink="+s.APIEndpoint)
	}

	return args
}

// ConfigOverTLS says whether a Talos at version fetches its configuration over HTTPS: it
// reads talos.config.early (Talos 1.11 and later), where it learns the CA to verify the
// provider with. An older one fetches it over plain HTTP.
func (s *Scripts) ConfigOverTLS(talosVersion string) bool {
	return s.TLSBaseURL != "" && s.EarlyConfig != "" && earlyconfig.Supported(talosVersion)
}

// talosCmdline is the factory's cmdline followed by the boot's own arguments, after what
// the boot path puts first (iPXE's initrd=); an error when the whole kernel line would
// not fit Linux's.
func (s *Scripts) talosCmdline(first, factory, talosVersion string, claims token.Claims) (string, error) {
	cmdline := factory + " " + strings.Join(s.bootArgs(talosVersion, claims), " ")

	if n := len(first) + len(cmdline); n >= maxKernelLine {
		return "", fmt.Errorf("the kernel line would be %d bytes, past Linux's %d: shorten the schematic's kernel arguments", n, maxKernelLine-1)
	}

	return cmdline, nil
}

// talosKernel is how one Talos boots by iPXE: where its kernel and initramfs are, and
// the factory's cmdline for its schematic.
type talosKernel struct {
	kernelURL, initramfs, initramfsURL, cmdline string
}

// talosKernelFor makes img ready to boot for arch, within scriptWait (iPXE waits for its
// script, not for ever: a long first download goes on in the cache while the machine
// asks again): from the provider's cache, or without one from the factory's PXE
// endpoint with the cmdline the provider fetched.
func (s *Scripts) talosKernelFor(ctx context.Context, img talosImage, arch string) (talosKernel, error) {
	ctx, cancel := context.WithTimeout(ctx, scriptWait)
	defer cancel()

	if s.Cache == nil {
		return s.factoryKernel(ctx, img, arch)
	}

	tb, err := s.talosBoot(ctx, img, arch)
	if err != nil {
		return talosKernel{}, err
	}

	return talosKernel{kernelURL: tb.KernelURL, initramfs: tb.Initramfs, initramfsURL: tb.InitramfsURL, cmdline: tb.Cmdline}, nil
}

// talosScript is the iPXE script that boots the allocation's Talos with the factory's
// cmdline and the boot's own arguments; one that retries while Talos cannot boot yet.
func (s *Scripts) talosScript(ctx context.Context, req Request, alloc *resources.Allocation) Script {
	k, err := s.talosKernelFor(ctx, s.allocationImage(req.MachineID, alloc), req.Arch)
	if err != nil {
		return s.talosNotReady(err)
	}

	// Debian's 2019 iPXE needs initrd=<name> on the kernel line under EFI.
	initrd := "initrd=" + k.initramfs + " "

	cmdline, err := s.talosCmdline(initrd, k.cmdline, alloc.TalosVersion, MetadataClaims(req.MachineID, alloc.ID))
	if err != nil {
		return s.talosNotReady(err)
	}

	return Script{Status: http.StatusOK, Handoff: true, Body: "#!ipxe\n" +
		"imgfree\n" +
		"kernel " + k.kernelURL + " " + initrd + cmdline + "\n" +
		"initrd " + k.initramfsURL + "\n" +
		"boot\n"}
}

// readCmdline reads a cached cmdline: see parseCmdline.
func readCmdline(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}

	defer f.Close()

	b, err := io.ReadAll(io.LimitReader(f, maxCmdline+1))
	if err != nil {
		return "", err
	}

	return parseCmdline(b)
}

// parseCmdline makes the factory's cmdline one line of arguments, refusing one longer
// than maxCmdline, empty, or with what a kernel line cannot carry (a control character
// would end the iPXE line, and more commands could follow it).
func parseCmdline(b []byte) (string, error) {
	if len(b) > maxCmdline {
		return "", fmt.Errorf("it is more than %d bytes", maxCmdline)
	}

	args := strings.Fields(string(b))
	if len(args) == 0 || !safeArgs(args) {
		return "", fmt.Errorf("it is empty or has what a kernel line cannot carry")
	}

	return strings.Join(args, " "), nil
}

// talosNotReady is the script that tells why Talos cannot boot yet and asks again in a
// while.
func (s *Scripts) talosNotReady(err error) Script {
	return Script{Status: http.StatusOK, Body: "#!ipxe\n" +
		"echo Anvil: the Talos boot assets are not ready (" + scriptSafe(err.Error()) + "); retrying in 10 s\n" +
		"sleep 10\n" +
		"chain " + s.BaseURL + "/ipxe/start.ipxe\n"}
}

// scriptSafe keeps a message to one line of printable text for an iPXE echo.
func scriptSafe(msg string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '$' {
			return ' '
		}

		return r
	}, msg)
}
