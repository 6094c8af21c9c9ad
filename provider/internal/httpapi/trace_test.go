package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/httpapi"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// notReady is an image cache still fetching everything.
type notReady struct{}

func (notReady) Get(context.Context, imagecache.Key) (imagecache.Blob, error) {
	return imagecache.Blob{}, errors.New("still downloading")
}

func phases(marks []boottrace.Mark) []string {
	out := make([]string, 0, len(marks))
	for _, m := range marks {
		out = append(out, string(m.Phase)+"/"+m.Detail)
	}

	return out
}

// The boot script, the agent's initramfs (not its kernel) and a Talos script that hands
// the machine over are marked on the machine's timeline.
func TestBootTimeline(t *testing.T) {
	t.Parallel()

	f := newFixture(t)
	trace := boottrace.New(nil)
	f.server = httpapi.New(httpapi.Options{
		State: f.store, View: f.view, Scripts: f.scripts, Observations: f.obs, Installs: f.rec,
		Trace: trace, Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t),
	})

	code, _ := f.get(t, bootURL(m1))
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, []string{"script/agent"}, phases(trace.Timeline(m1)))
	assert.Equal(t, "uefi", trace.Timeline(m1)[0].Firmware)

	code, _ = f.get(t, "/assets/agent/vmlinuz-amd64")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, []string{"script/agent"}, phases(trace.Timeline(m1)), "the kernel is not the mark")

	code, _ = f.get(t, "/assets/agent/initramfs-amd64.xz")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, []string{"script/agent", "agent-assets/"}, phases(trace.Timeline(m1)))

	// An allocated machine: while the cache fetches its assets it is asked to come back,
	// which is no handoff; the script that boots Talos is.
	f.machine(t, m2, "192.0.2.2", lifecycle.BootAgent, &resources.MachineIntentSpec{
		Acceptance: resources.AcceptanceAccepted, Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: s1},
	}, nil)

	// A Scripts of its own, whose boot assets are never ready.
	waiting := boot.Scripts{
		BaseURL: f.scripts.BaseURL, APIEndpoint: f.scripts.APIEndpoint, FactoryPXEBaseURL: f.scripts.FactoryPXEBaseURL,
		Platform: f.scripts.Platform, DiskMethod: f.scripts.DiskMethod, Assets: f.scripts.Assets, Tokens: f.scripts.Tokens,
		Cache: notReady{},
	}
	f.server = httpapi.New(httpapi.Options{
		State: f.store, View: f.view, Scripts: &waiting, Observations: f.obs, Installs: f.rec,
		Trace: trace, Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t),
	})

	code, body := f.get(t, bootURL(m2))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "not ready")
	assert.Equal(t, []string{"script/talos"}, phases(trace.Timeline(m2)))

	f.server = httpapi.New(httpapi.Options{
		State: f.store, View: f.view, Scripts: f.scripts, Observations: f.obs, Installs: f.rec,
		Trace: trace, Registry: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t),
	})

	code, body = f.get(t, bootURL(m2))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "kernel "+f.scripts.FactoryPXEBaseURL+"/image/")
	assert.Equal(t, []string{"script/talos", "handoff/ipxe"}, phases(trace.Timeline(m2)))
}

// Known results are in /metrics from the start, at 0.
func TestMetricsExistAtStart(t *testing.T) {
	t.Parallel()

	f := newFixture(t)

	code, body := f.get(t, "/metrics")
	require.Equal(t, http.StatusOK, code)

	for _, want := range []string{
		`anvil_metadata_requests_total{result="served"} 0`,
		`anvil_event_sink_events_total{result="installed"} 0`,
		`anvil_boot_scripts_total{decision="disk"} 0`,
	} {
		assert.Contains(t, body, want)
	}
}
