package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/siderolink/api/events"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/anvil-metal/anvil/hack/internal/labpki"
	"github.com/anvil-metal/anvil/internal/earlyconfig"
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

// TestRunOverTLS: as Talos 1.11 and later, the stand-in fetches its config over HTTPS,
// trusting the roots talos.config.early gives it, and nothing else: a server whose
// certificate another CA signed gets no request, however long the stand-in retries.
func TestRunOverTLS(t *testing.T) {
	t.Parallel()

	var requests atomic.Int32

	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)

		_, _ = w.Write([]byte("hello"))
	})

	provider := httptest.NewTLSServer(handler)
	t.Cleanup(provider.Close)

	// httptest's servers share one certificate: the impostor has one of its own.
	impostor := httptest.NewUnstartedServer(handler)
	impostor.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, MinVersion: tls.VersionTLS12}
	impostor.StartTLS()
	t.Cleanup(impostor.Close)

	early, err := earlyconfig.TrustedRoots(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: provider.Certificate().Raw}))
	require.NoError(t, err)

	var out bytes.Buffer

	require.NoError(t, run(t.Context(), zap.NewNop(), &out, earlyconfig.Param+"="+early+" talos.config="+provider.URL+"/metadata/m?token=tok"))
	assert.Contains(t, out.String(), "config status=200 bytes=5 ")
	assert.Equal(t, int32(1), requests.Load())

	out.Reset()

	// Long enough for an attempt to finish on a loaded host: the error then names it.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	err = run(ctx, zap.NewNop(), &out, earlyconfig.Param+"="+early+" talos.config="+impostor.URL+"/metadata/m?token=tok")
	require.ErrorContains(t, err, "x509")
	assert.NotContains(t, out.String(), "config status=")
	assert.Equal(t, int32(1), requests.Load(), "the impostor got no request")

	// An early config that is not one stops the stand-in at once.
	require.ErrorContains(t, run(t.Context(), zap.NewNop(), &out, earlyconfig.Param+"=%%% talos.config="+provider.URL+"/m"), earlyconfig.Param)
}

// selfSigned is a certificate for 127.0.0.1 from a CA of its own.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()

	ca, err := labpki.NewCA("impostor")
	require.NoError(t, err)

	pair, err := ca.IssueServer("127.0.0.1")
	require.NoError(t, err)

	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	require.NoError(t, err)

	return cert
}
