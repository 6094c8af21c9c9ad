package providerimage

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// layerSpec is one layer: what changes least comes first, so that a new provider is one
// small layer to push and pull.
type layerSpec struct {
	name    string
	entries []entry
}

func layers(opts Options) ([]layerSpec, error) {
	for _, bin := range []struct{ what, path string }{{"provider", opts.Provider}, {"Omni adapter", opts.OmniAdapter}} {
		if err := checkStatic(bin.what, bin.path, opts.Arch); err != nil {
			return nil, err
		}
	}

	if opts.CABundle == "" {
		return nil, fmt.Errorf("no CA bundle given")
	}

	ipxe, err := ipxeEntries(opts.IPXEDir, opts.IPXEFiles)
	if err != nil {
		return nil, err
	}

	agent, err := agentEntries(opts.AgentAssets, opts.Arch)
	if err != nil {
		return nil, err
	}

	state := rel(StateDir) + "/"

	return []layerSpec{
		{"base", []entry{
			{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
			{name: "etc/group", mode: 0o644, data: []byte(group)},
			{name: rel(CABundlePath), mode: 0o644, src: opts.CABundle},
			{name: "tmp/", mode: 0o1777},
			{name: state, mode: 0o750, uid: UID, gid: GID},
		}},
		{"ipxe", ipxe},
		{"agent", agent},
		{"omni-adapter", []entry{{name: rel(OmniAdapterPath), mode: 0o755, src: opts.OmniAdapter}}},
		{"provider", []entry{{
			name: rel(ProviderPath), mode: 0o755, src: opts.Provider,
			xattrs: map[string]string{CapabilityXattr: FileCapabilities()},
		}}},
	}, nil
}

// The image's users and groups: root owns the files, anvil runs the provider, nobody is
// there for whatever looks it up.
var (
	passwd = "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
		fmt.Sprintf("%s:x:%d:%d:Anvil provider:%s:/usr/sbin/nologin\n", UserName, UID, GID, StateDir) +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group = fmt.Sprintf("root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", UserName, GID)
)

// rel is an absolute image path as a layer names it.
func rel(p string) string { return strings.TrimPrefix(p, "/") }

func ipxeEntries(dir string, names []string) ([]entry, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("no iPXE binaries named")
	}

	entries := make([]entry, 0, len(names))

	for _, name := range names {
		if name != filepath.Base(name) || strings.HasPrefix(name, ".") {
			return nil, fmt.Errorf("iPXE binary %q is not a file name", name)
		}

		// Stat follows Debian's symlinks (ipxe.efi → /boot/ipxe.efi): the file is copied.
		src := filepath.Join(dir, name)
		if info, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("error reading the iPXE binary (Debian's ipxe package has them): %w", err)
		} else if !info.Mode().IsRegular() {
			return nil, fmt.Errorf("iPXE binary %s is not a regular file", src)
		}

		entries = append(entries, entry{name: path.Join(rel(IPXEDir), name), mode: 0o644, src: src})
	}

	return entries, nil
}

// agentEntries are the agent's boot assets in dir, of every architecture there: the
// provider picks a machine's. Arch's kernel and initramfs must be among them.
func agentEntries(dir, arch string) ([]entry, error) {
	files, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("error reading the agent's boot assets (make agent-initramfs builds them): %w", err)
	}

	var (
		entries []entry
		names   []string
	)

	for _, f := range files {
		name := f.Name()
		if !strings.HasPrefix(name, "vmlinuz-") && !strings.HasPrefix(name, "initramfs-") && !strings.HasPrefix(name, "cmdline-") {
			continue // the build's stamp, anything else
		}

		src := filepath.Join(dir, name)
		if info, err := os.Stat(src); err != nil || !info.Mode().IsRegular() {
			return nil, fmt.Errorf("agent boot asset %s is not a regular file", src)
		}

		names = append(names, name)
		entries = append(entries, entry{name: path.Join(rel(AgentDir), name), mode: 0o644, src: src})
	}

	if !slices.Contains(names, "vmlinuz-"+arch) || !slices.ContainsFunc(names, func(n string) bool {
		return n == "initramfs-"+arch+".zst" || n == "initramfs-"+arch+".xz"
	}) {
		return nil, fmt.Errorf("no agent kernel and initramfs for %s in %s (make agent-initramfs builds them)", arch, dir)
	}

	return entries, nil
}

// machines are the ELF machines of the architectures an image is built for.
var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// checkStatic refuses what the image could not run: anything but an ELF executable of
// arch, or a dynamically linked one (the image has no libc nor loader).
func checkStatic(what, bin, arch string) error {
	want, ok := machines[arch]
	if !ok {
		return fmt.Errorf("unsupported architecture %q (amd64 or arm64)", arch)
	}

	if bin == "" {
		return fmt.Errorf("no %s binary given", what)
	}

	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("error reading the %s binary %s as an ELF executable: %w", what, bin, err)
	}

	defer f.Close()

	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s %s is dynamically linked; build it with CGO_ENABLED=0", what, bin)
		}
	}

	if f.Machine != want {
		return fmt.Errorf("%s %s is built for %s, not %s", what, bin, f.Machine, arch)
	}

	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s %s is not an executable (%s)", what, bin, f.Type)
	}

	return nil
}

// CapabilityXattr is the extended attribute holding a file's capabilities.
const CapabilityXattr = "security.capability"

// The capabilities' numbers and the xattr's format (linux/capability.h).
var capabilityNumbers = map[string]int{"NET_BIND_SERVICE": 10, "NET_RAW": 13}

const (
	vfsCapRevision2      = 0x02000000
	vfsCapFlagsEffective = 0x000001
)

// FileCapabilities is the provider's security.capability: Capabilities permitted and
// effective, what "setcap cap_net_bind_service,cap_net_raw=ep" writes. A runtime grants
// capabilities to a non-root user's process only through its file (ambient capabilities
// are not set by containerd nor Docker); the effective bit is for the provider, which
// does not raise them itself.
func FileCapabilities() string {
	var permitted [2]uint32

	for _, name := range Capabilities {
		c := capabilityNumbers[name]
		permitted[c/32] |= 1 << (c % 32)
	}

	// struct vfs_cap_data: magic_etc, then {permitted, inheritable} for caps 0-31, 32-63.
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], vfsCapRevision2|vfsCapFlagsEffective)
	binary.LittleEndian.PutUint32(b[4:], permitted[0])
	binary.LittleEndian.PutUint32(b[12:], permitted[1])

	return string(b)
}
