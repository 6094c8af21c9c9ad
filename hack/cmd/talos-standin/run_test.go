package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/siderolabs/siderolink/api/events"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// sink records the events published to it.
type sink struct {
	events.UnimplementedEventSinkServiceServer

	mu  sync.Mutex
	got []string
}

func (s *sink) Publish(_ context.Context, req *events.EventRequest) (*events.EventResponse, error) {
	var got string

	var (
		seq   machine.SequenceEvent
		phase machine.PhaseEvent
	)

	switch {
	case req.GetData().UnmarshalTo(&seq) == nil:
		got = "sequence " + seq.GetSequence() + " " + seq.GetAction().String()
		if e := seq.GetError(); e != nil {
			got += " " + e.GetCode().String() + " " + e.GetMessage()
		}
	case req.GetData().UnmarshalTo(&phase) == nil:
		got = "phase " + phase.GetPhase() + " " + phase.GetAction().String()
	default:
		got = req.GetData().GetTypeUrl()
	}

	s.mu.Lock()
	s.got = append(s.got, got)
	s.mu.Unlock()

	return &events.EventResponse{}, nil
}

// TestRun: outside an initramfs, the stand-in reports its boot, fetches its config and
// sends the install sequence's events, as Talos does.
func TestRun(t *testing.T) {
	t.Parallel()

	cfg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != "tok" {
			http.Error(w, "no", http.StatusForbidden)

			return
		}

		_, _ = w.Write([]byte("hello"))
	}))
	t.Cleanup(cfg.Close)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	s := &sink{}
	srv := grpc.NewServer()
	events.RegisterEventSinkServiceServer(srv, s)

	go srv.Serve(l) //nolint:errcheck // ends with Stop

	t.Cleanup(srv.Stop)

	var out bytes.Buffer

	cmdline := "console=ttyS0 anvil.lab.schematic=abc anvil.lab.version=v1.9.0 talos.config=" + cfg.URL + "/metadata/m?token=tok talos.events.sink=" + l.Addr().String()
	require.NoError(t, run(t.Context(), zap.NewNop(), &out, cmdline))

	assert.Equal(t, "TALOS-STANDIN schematic=abc version=v1.9.0\n"+
		"TALOS-STANDIN cmdline="+cmdline+"\n"+
		"TALOS-STANDIN config status=200 bytes=5 sha256=2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\n"+
		"TALOS-STANDIN installed\n", out.String())
	assert.Equal(t, []string{
		"sequence install START",
		"phase install START",
		"phase install STOP",
		"phase kexec START",
		"sequence install STOP",
		"sequence install NOOP FATAL " + installRebootError,
	}, s.got)

	// A refused config is reported with its status, not retried.
	out.Reset()
	require.NoError(t, run(t.Context(), zap.NewNop(), &out, "talos.config="+cfg.URL+"/metadata/m?token=bad"))
	assert.Contains(t, out.String(), "config status=403 ")
	assert.NotContains(t, out.String(), "installed")
}
