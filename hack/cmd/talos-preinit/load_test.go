package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/internal/modules"
)

// fakeLoader records what it is asked to load, failing with errs by module name.
type fakeLoader struct {
	loaded []string
	errs   map[string]error
}

func (l *fakeLoader) Load(m modules.Module) error {
	l.loaded = append(l.loaded, m.Name)

	return l.errs[m.Name]
}

// modulesDir writes a modules directory whose modules.dep is dep (the files themselves are
// not read: the loader is fake).
func modulesDir(t *testing.T, dep string) string {
	t.Helper()

	dir := t.TempDir()
	for name, content := range map[string]string{
		"modules.dep":     dep,
		"modules.alias":   "",
		"modules.builtin": "kernel/drivers/block/loop.ko\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}

	return dir
}

// A kernel's modules.dep as depmod writes it, a module's deepest dependency last:
// wireguard needs the UDP tunnels and curve25519, which needs libcurve25519-generic.
const wireguardDep = `kernel/drivers/net/virtio_net.ko.xz: kernel/drivers/net/net_failover.ko.xz kernel/net/core/failover.ko.xz
kernel/drivers/net/net_failover.ko.xz: kernel/net/core/failover.ko.xz
kernel/net/core/failover.ko.xz:
kernel/drivers/net/wireguard/wireguard.ko.xz: kernel/net/ipv4/udp_tunnel.ko.xz kernel/net/ipv6/ip6_udp_tunnel.ko.xz kernel/lib/crypto/libcurve25519.ko.xz kernel/lib/crypto/libcurve25519-generic.ko.xz
kernel/net/ipv4/udp_tunnel.ko.xz:
kernel/net/ipv6/ip6_udp_tunnel.ko.xz:
kernel/lib/crypto/libcurve25519.ko.xz: kernel/lib/crypto/libcurve25519-generic.ko.xz
kernel/lib/crypto/libcurve25519-generic.ko.xz:
kernel/fs/squashfs/squashfs.ko.xz:
`

func TestLoadAll(t *testing.T) {
	t.Parallel()

	all := []string{
		"failover", "net_failover", "virtio_net", "libcurve25519_generic", "libcurve25519",
		"ip6_udp_tunnel", "udp_tunnel", "wireguard", "squashfs",
	}

	for _, tc := range []struct {
		name           string
		dep            string
		errs           map[string]error
		want           []string // the order the loader is asked for, when it matters
		loaded, failed int
		logged         []string
	}{
		{
			name: "dependencies first, each once", dep: wireguardDep,
			want:   all,
			loaded: 9,
		},
		{
			name: "already loaded is loaded", dep: wireguardDep,
			errs:   map[string]error{"udp_tunnel": fmt.Errorf("finit_module udp_tunnel.ko.xz: %w", unix.EEXIST), "squashfs": unix.EEXIST},
			want:   all,
			loaded: 9,
		},
		{
			name: "a failure is reported, the rest still load", dep: wireguardDep,
			errs:   map[string]error{"libcurve25519_generic": fmt.Errorf("finit_module: %w", unix.ENOEXEC), "virtio_net": errors.New("no device")},
			want:   all,
			loaded: 7, failed: 2,
			logged: []string{"loading virtio_net.ko.xz: no device", "loading libcurve25519-generic.ko.xz: finit_module: exec format error"},
		},
		{
			// Built-in modules are not loaded; a dependency neither loadable nor built in
			// fails its module alone.
			name: "built in and unknown dependencies",
			dep:  "kernel/fs/overlayfs/overlay.ko.xz: kernel/drivers/block/loop.ko\nkernel/fs/x.ko: kernel/fs/missing.ko\nkernel/fs/y.ko:\n",
			want: []string{"overlay", "y"}, loaded: 2, failed: 1,
			logged: []string{"x: module missing: not in modules.dep nor modules.builtin"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			l := &fakeLoader{errs: tc.errs}

			var logged []string

			logf := func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }

			loaded, failed, err := loadAll(modulesDir(t, tc.dep), l, logf)
			require.NoError(t, err)

			assert.Equal(t, tc.want, l.loaded)
			assert.Equal(t, tc.loaded, loaded, "loaded")
			assert.Equal(t, tc.failed, failed, "failed")

			var want []string
			for _, s := range tc.logged {
				want = append(want, "talos-preinit: "+s)
			}

			assert.Equal(t, want, logged)

			// Whatever the order, every module after its dependencies.
			for i, name := range l.loaded {
				assert.NotContains(t, l.loaded[i+1:], name, "%s loaded twice", name)
			}

			assert.True(t, slices.Index(l.loaded, "wireguard") > slices.Index(l.loaded, "libcurve25519") ||
				!strings.Contains(tc.dep, "wireguard"))
		})
	}

	_, _, err := loadAll(t.TempDir(), &fakeLoader{}, func(string, ...any) {})
	assert.ErrorContains(t, err, "modules.dep")
}
