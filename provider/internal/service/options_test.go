package service

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
)

func TestParseLabels(t *testing.T) {
	t.Parallel()

	got, err := parseLabels([]string{"dc=nyc", "rack=r1", "gpu", "empty="})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"dc": "nyc", "rack": "r1", "gpu": "", "empty": ""}, got)

	_, err = parseLabels([]string{"=nyc"})
	assert.ErrorContains(t, err, `invalid machine label "=nyc"`)

	_, err = parseLabels([]string{"anvil.dev/vendor=dell"})
	assert.ErrorContains(t, err, "reserved prefix")

	_, err = parseLabels([]string{"dc=new york"})
	assert.ErrorContains(t, err, `invalid machine label "dc=new york"`)
}

func TestParseAutoAccept(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in    string
		on    bool
		terms int
		err   string
	}{
		{in: ""},
		{in: "all", on: true},
		{in: " all ", on: true},
		{in: "dc=nyc", on: true, terms: 1},
		{in: "dc=nyc,anvil.dev/disk-type in (nvme,ssd),!gpu", on: true, terms: 3},
		{in: "dc=", on: true, terms: 1},
		{in: "dc=nyc,", err: "invalid --auto-accept"},
	} {
		on, q, err := parseAutoAccept(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)

			continue
		}

		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.on, on, tc.in)
		assert.Len(t, q.Terms, tc.terms, tc.in)
	}
}

func TestParseRange(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in         string
		start, end string
		err        string
	}{
		{in: "10.0.0.100-10.0.0.200", start: "10.0.0.100", end: "10.0.0.200"},
		{in: " 10.0.0.100 - 10.0.0.200 ", start: "10.0.0.100", end: "10.0.0.200"},
		{in: "10.0.0.100", err: "want start-end"},
		{in: "x-10.0.0.200", err: "range start"},
		{in: "10.0.0.100-y", err: "range end"},
	} {
		start, end, err := parseRange(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)

			continue
		}

		require.NoError(t, err, tc.in)
		assert.Equal(t, netip.MustParseAddr(tc.start), start)
		assert.Equal(t, netip.MustParseAddr(tc.end), end)
	}
}

func TestAdvertiseAddress(t *testing.T) {
	t.Parallel()

	got, err := advertiseAddress("10.77.0.1")
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("10.77.0.1"), got)

	_, err = advertiseAddress("not-an-ip")
	assert.ErrorContains(t, err, "invalid --api-advertise-address")

	sub, err := subnetOf(netip.MustParseAddr("127.0.0.1"))
	require.NoError(t, err)
	assert.Equal(t, netip.MustParsePrefix("127.0.0.0/8"), sub)
}

func TestParseKernelArgs(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"", []string{}, ""},
		{"no_timer_check  console=ttyS1,115200\n", []string{"no_timer_check", "console=ttyS1,115200"}, ""},
		{"quiet\x00chain", nil, "--talos-kernel-args: \"quiet\\x00chain\" has a control character"},
	} {
		got, err := parseKernelArgs("talos-kernel-args", tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)

			continue
		}

		assert.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestOmniAdapter(t *testing.T) {
	t.Parallel()

	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("a2V5LWZyb20tZmlsZQ==\n"), 0o600))

	adapterBin := filepath.Join(t.TempDir(), "omni-adapter")
	require.NoError(t, os.WriteFile(adapterBin, []byte("#!/bin/sh\n"), 0o700))

	omni := func(o *Options) { o.OmniAPIEndpoint, o.OmniAdapter = "https://omni:8099", adapterBin }

	for _, tc := range []struct {
		name   string
		change func(*Options)
		omni   bool
		key    string
		err    string
	}{
		{"standalone", func(*Options) {}, false, "", ""},
		{"key from the environment", func(o *Options) { omni(o); o.OmniServiceAccountKey = "ZW52" }, true, "ZW52", ""},
		{"key from a file wins", func(o *Options) { omni(o); o.OmniServiceAccountKey, o.OmniServiceAccountKeyFile = "ZW52", keyFile }, true, "a2V5LWZyb20tZmlsZQ==", ""},
		{"no key", omni, false, "", "service account key"},
		{"auto-accept is Omni's", func(o *Options) { omni(o); o.OmniServiceAccountKey, o.AutoAccept = "ZW52", "all" }, false, "", "Omni owns acceptance"},
		{"missing key file", func(o *Options) { omni(o); o.OmniServiceAccountKeyFile = "/nonexistent" }, false, "", "--omni-service-account-key-file"},
		{"empty id", func(o *Options) { omni(o); o.OmniServiceAccountKey, o.ProviderID = "ZW52", "" }, false, "", "--id"},
		{"not a URL", func(o *Options) { omni(o); o.OmniServiceAccountKey, o.OmniAPIEndpoint = "ZW52", "omni:8099" }, false, "", "is not a URL"},
		{"no adapter", func(o *Options) {
			omni(o)
			o.OmniServiceAccountKey, o.OmniAdapter = "ZW52", "/nonexistent/omni-adapter"
		}, false, "", "Omni adapter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			opts := DefaultOptions
			tc.change(&opts)

			got, omniMode, err := omniAdapter(opts, "v1.2.3")
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				assert.NotContains(t, err.Error(), "ZW52", "the key is never in an error")

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.omni, omniMode)

			if omniMode {
				assert.Equal(t, tc.key, got.ServiceAccountKey)
				assert.Equal(t, adapterBin, got.Bin)
				assert.Contains(t, strings.Join(got.Args, " "), "--id bare-metal")
				assert.Contains(t, strings.Join(got.Args, " "), "--version v1.2.3")
				assert.NotContains(t, strings.Join(got.Args, " "), tc.key, "the key is never on the adapter's command line")
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"10GiB", 10 << 30},
		{"10Gi", 10 << 30},
		{"10 gib", 10 << 30},
		{"1.5GiB", 3 << 29},
		{"500MiB", 500 << 20},
		{"20G", 20e9},
		{"20GB", 20e9},
		{"1TiB", 1 << 40},
		{"64KiB", 64 << 10},
		{"1073741824", 1 << 30},
		{"4096B", 4096},
		{" 2GiB ", 2 << 30},
		{"", 0},
		{"GiB", 0},
		{"0", 0},
		{"0.5", 0},
		{"-1GiB", 0},
		{"10GiBs", 0},
		{"10 PiB", 0},
		{"ten", 0},
		{"NaN", 0},
		{"1e30TiB", 0},
	} {
		got, err := parseSize("--image-cache-size", tc.in)
		if tc.want == 0 {
			assert.ErrorContains(t, err, `invalid --image-cache-size "`+tc.in+`": want a positive size like 10GiB`, tc.in)

			continue
		}

		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestOpenImageCache(t *testing.T) {
	t.Parallel()

	state := t.TempDir()
	opts := DefaultOptions
	opts.StateDir = state

	cache, err := openImageCache(opts, nil, zaptest.NewLogger(t))
	require.NoError(t, err)
	require.NoError(t, cache.Close())
	assert.DirExists(t, filepath.Join(state, "image-cache", "blobs"), "under the state directory by default")

	opts.ImageCacheDir = filepath.Join(t.TempDir(), "cache")
	cache, err = openImageCache(opts, nil, zaptest.NewLogger(t))
	require.NoError(t, err)
	require.NoError(t, cache.Close())
	assert.DirExists(t, filepath.Join(opts.ImageCacheDir, "blobs"))

	opts.ImageCacheSize = "lots"
	_, err = openImageCache(opts, nil, zaptest.NewLogger(t))
	require.ErrorContains(t, err, `invalid --image-cache-size "lots"`)

	opts.ImageCacheSize = "0"
	cache, err = openImageCache(opts, nil, zaptest.NewLogger(t))
	require.NoError(t, err)
	assert.Nil(t, cache, "0 turns the cache off")
}

// TestParsePolicy: the flags of what happens to every machine, checked together.
func TestParsePolicy(t *testing.T) {
	t.Parallel()

	kexec := func(t *testing.T, opts Options, p lifecycle.Policy) {
		t.Helper()
		assert.Equal(t, opts.Kexec, p.Kexec)
		assert.Equal(t, opts.KexecTimeout, p.KexecTimeout)
		assert.Equal(t, opts.KexecKeepWarm, p.KeepWarm)
	}

	wipeScope := func(t *testing.T, opts Options, p lifecycle.Policy) {
		t.Helper()
		assert.Equal(t, opts.WipeScope, p.WipeScope)
		assert.Equal(t, opts.WipeKeep, p.WipeKeep)
		assert.Equal(t, opts.InstallDisk, p.InstallDisk)
	}

	for _, tc := range []struct {
		name    string
		change  func(*Options)
		wantErr string
		check   func(*testing.T, Options, lifecycle.Policy)
	}{
		{name: "defaults", change: func(*Options) {}, check: kexec},
		{name: "never", change: func(o *Options) { o.Kexec = "never" }, check: kexec},
		{name: "keep warm", change: func(o *Options) { o.KexecKeepWarm = 15 * time.Minute }, check: kexec},
		{name: "unknown mode", change: func(o *Options) { o.Kexec = "sometimes" }, wantErr: `unknown --kexec "sometimes" (want auto, always, never)`},
		{name: "no timeout", change: func(o *Options) { o.KexecTimeout = 0 }, wantErr: "--kexec-timeout must be positive"},
		{name: "negative keep warm", change: func(o *Options) { o.KexecKeepWarm = -time.Second }, wantErr: "--kexec-keep-warm must not be negative"},
		{name: "wipe scope: all by default", change: func(*Options) {}, check: wipeScope},
		{name: "all but data disks", change: func(o *Options) { o.WipeScope, o.WipeKeep = "all-except", "model=ST16000*" }, check: wipeScope},
		{name: "the install disk", change: func(o *Options) { o.WipeScope, o.InstallDisk = "install-disk", "type=nvme,pick=smallest" }, check: wipeScope},
		{name: "all-except keeps something", change: func(o *Options) { o.WipeScope = "all-except" }, wantErr: "--wipe-scope: wipe scope all-except needs a selector"},
		{name: "a keep selector without all-except", change: func(o *Options) { o.WipeKeep = "type=hdd" }, wantErr: "goes with the all-except scope"},
		{name: "install-disk needs a default disk", change: func(o *Options) { o.WipeScope = "install-disk" }, wantErr: "--wipe-scope install-disk needs --install-disk"},
		{name: "unknown scope", change: func(o *Options) { o.WipeScope = "most" }, wantErr: `wipe scope "most" is not one of`},
		{name: "malformed install disk", change: func(o *Options) { o.InstallDisk = "biggest" }, wantErr: `--install-disk: disk selector "biggest"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			opts := DefaultOptions
			tc.change(&opts)

			p, err := parsePolicy(opts)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)

				return
			}

			require.NoError(t, err)
			tc.check(t, opts, p)
		})
	}
}
