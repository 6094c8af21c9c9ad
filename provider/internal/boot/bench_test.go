package boot_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// BenchmarkRender is one rendered boot script per kind, its token signed: the Talos
// script for the same allocation again ("talos-again") and for an allocation other than
// the last one's ("talos-changed"), which no cache of rendered scripts could answer.
// Without a boot-asset cache: the factory's cmdline is fetched once, then kept.
func BenchmarkRender(b *testing.B) {
	dir := b.TempDir()

	factory := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("talos.platform=metal console=ttyS0 console=tty0 init_on_alloc=1 slab_nomerge pti=on consoleblank=0 printk.devkmsg=on\n"))
	}))
	b.Cleanup(factory.Close)

	for name, content := range map[string]string{"vmlinuz-amd64": "kernel", "initramfs-amd64.xz": "initramfs"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}

	assets, err := boot.LoadAgentAssets(dir)
	if err != nil {
		b.Fatal(err)
	}

	s := &boot.Scripts{
		BaseURL: "http://10.77.0.1:50042", APIEndpoint: "10.77.0.1:50042", CAFingerprint: "abcd",
		FactoryPXEBaseURL: factory.URL, Platform: "metal", DiskMethod: boot.DiskIPXEExit,
		Assets: assets, Tokens: token.NewSigner([]byte("0123456789abcdef0123456789abcdef")),
	}
	req := boot.Request{MachineID: "4c4c4544-0000-1000-8000-000000000001", Arch: "amd64", Firmware: "efi"}
	allocs := [2]*resources.Allocation{
		{ID: "a1", TalosVersion: "v1.9.0", SchematicID: "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"},
		{ID: "a2", TalosVersion: "v1.9.0", SchematicID: "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"},
	}

	for _, tc := range []struct {
		name   string
		allocs []*resources.Allocation
	}{
		{"talos-again", allocs[:1]}, {"talos-changed", allocs[:]},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()

			i := 0
			for b.Loop() {
				d := lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: tc.allocs[i%len(tc.allocs)]}
				i++

				if got := s.Render(b.Context(), req, d, token.Claims{}); !got.Handoff {
					b.Fatalf("no handoff: %s", got.Body)
				}
			}
		})
	}

	b.Run("agent", func(b *testing.B) {
		b.ReportAllocs()

		for b.Loop() {
			got := s.Render(b.Context(), req, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{Issued: time.Unix(1700000000, 0)})
			if got.AgentToken.Kind != token.KindAgent {
				b.Fatalf("no agent token: %s", got.Body)
			}
		}
	})
}
