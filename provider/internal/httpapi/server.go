// Package httpapi serves the provider's HTTP routes: iPXE scripts, agent boot assets,
// Talos boot assets (from the image cache), the metadata server, Talos' event sink (gRPC
// on the same port), health and metrics.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/siderolabs/siderolink/api/events"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/tamper"
)

// InstallRecorder records that a machine was installed under an allocation, and that an
// allocation's Talos was seen up (it fetched its configuration), which confirms a kexec
// handoff into it.
type InstallRecorder interface {
	RecordInstalled(ctx context.Context, machineID, allocationID, source string) error
	RecordTalosSeen(ctx context.Context, machineID, allocationID string) error
	// UseConfigToken records a use of the allocation's metadata token, which reached
	// Talos by path (resources.ConfigPath…), from addr and says whether the
	// configuration may be served to it: only to the address that used it first.
	UseConfigToken(ctx context.Context, machineID, allocationID, path, addr string) (resources.ConfigFetchRecord, bool, error)
}

// Options configure the server.
type Options struct {
	State state.State
	// View is the boot services' read view of the machines, fed from State.
	View    *machineview.View
	Scripts *boot.Scripts
	// Policy is what the operator chose of every machine (the lifecycle's rules read it).
	Policy lifecycle.Policy
	// Observations receives what the boot services saw; a full channel drops the
	// observation (counted), it never slows a boot down.
	Observations chan<- controllers.PXEObservation
	Installs     InstallRecorder
	// Tamper raises the security events the handlers see (a config token replayed, an
	// install event from a foreign address); nil raises none.
	Tamper *tamper.Reporter
	// JoinConfig, in Omni mode, gives the join config documents Talos is served as its
	// machine configuration when its allocation carries none (Omni configures it over
	// SideroLink); false until known.
	JoinConfig func() (string, bool)
	// ImageCache serves the Talos boot assets (/assets/talos/...); without it they
	// answer 503.
	ImageCache *imagecache.Cache
	// Trace, when set, marks the boot phases served here on the machines' timelines:
	// boot script, agent assets, the handoff of an iPXE chain to Talos.
	Trace *boottrace.Recorder
	// BootFiles are the EFI binaries UEFI HTTP boot clients fetch (/boot/<name>), by the
	// name the DHCP answer gives: the same files PXE firmware gets over TFTP. Only these
	// names are served.
	BootFiles map[string]string
	// ConsoleURL is the web console's (https://host:port/ui/): /ui/ here redirects to it,
	// at the host the browser used. Empty: no console.
	ConsoleURL string
	Registry   *prometheus.Registry
	Logger     *zap.Logger
}

// Write deadlines: a client that reads nothing must not hold a connection, its goroutine
// and the file it asked for, for good.
const (
	// writeTimeout bounds writing the response of a small route: a boot script, a
	// machine's configuration, health, metrics, an event sink call. They are kilobytes,
	// written in well under a second; the deadline counts from the request's headers, so
	// it covers the handler's time too, hence the margin.
	writeTimeout = 30 * time.Second
	// assetWriteStall bounds how long the download of a boot asset (agent and Talos
	// kernels and initramfs, a UKI, an EFI binary: up to hundreds of MB, over links of any
	// speed) may make no progress. Its deadline moves on with every assetChunk written,
	// so a slow link finishes, and a client that stops reading is cut off.
	assetWriteStall = 30 * time.Second
	// assetChunk is what is written under one deadline: 1 MiB in 30 s is 35 KB/s, far
	// below any link a machine boots over.
	assetChunk = 1 << 20
)

// Server is the provider's HTTP server.
type Server struct {
	opts    Options
	metrics *metrics
	grpc    *grpc.Server
	handler http.Handler
	// writeTimeout and assetStall are the constants of the same names; tests shorten them.
	writeTimeout time.Duration
	assetStall   time.Duration
}

// New builds the server.
func New(opts Options) *Server {
	s := &Server{
		opts:    opts,
		metrics: newMetrics(opts.Registry),
		grpc:    grpc.NewServer(grpc.MaxRecvMsgSize(maxEventSize)),

		writeTimeout: writeTimeout,
		assetStall:   assetWriteStall,
	}

	events.RegisterEventSinkServiceServer(s.grpc, &eventSink{server: s})

	mux := http.NewServeMux()
	mux.HandleFunc("GET /ipxe/start.ipxe", s.handleStart)
	mux.HandleFunc("GET /ipxe/boot.ipxe", s.handleBoot)
	mux.HandleFunc("GET /assets/agent/{name}", s.asset(s.handleAgentAsset))
	mux.HandleFunc("GET /boot/{name...}", s.asset(s.handleBootFile))
	mux.HandleFunc("GET /boot/uki/{arch}/{uuid}/{mac}/boot.efi", s.asset(s.handleUKI))
	mux.HandleFunc("GET /assets/talos/{schematic}/{version}/{file}", s.asset(s.handleTalosAsset))
	mux.HandleFunc("GET /metadata/{machine}", s.handleMetadata)
	mux.HandleFunc("GET /healthz", s.handleHealth)
	mux.HandleFunc("GET /readyz", s.handleReady)
	mux.HandleFunc("GET /ui/", s.handleConsoleRedirect)
	// A collector that fails (the machines' power, on a replica cut off from etcd) leaves
	// its metrics out; the rest of the scrape is served.
	mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))

	// ServeMux would redirect an unclean path, repeating the query (a token) in Location.
	routes := refuseUncleanPaths(mux)

	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Talos dials the event sink with plaintext gRPC (HTTP/2 with prior knowledge).
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			s.grpc.ServeHTTP(w, r)

			return
		}

		routes.ServeHTTP(w, r)
	})

	return s
}

// handleHealth answers ok once the provider has started (its view holds the state):
// liveness, which a replica cut off from etcd keeps — restarting it would not bring etcd
// back.
func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-s.opts.View.Ready():
		_, _ = w.Write([]byte("ok\n"))
	default:
		http.Error(w, machineview.ErrStarting.Error(), http.StatusServiceUnavailable)
	}
}

// handleReady answers ok only while the boot services answer machines: not until the
// view holds the state, nor while it may be stale (a replica cut off from etcd), when
// boot requests get 503 too — for keepalived or a load balancer to move away.
func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	if err := s.opts.View.Serving(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)

		return
	}

	_, _ = w.Write([]byte("ok\n"))
}

// Handler returns the server's HTTP handler (for tests).
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on lis until ctx is done.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)

	srv := &http.Server{
		Handler:           s.handler,
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		// The asset routes set deadlines of their own (s.asset).
		WriteTimeout: s.writeTimeout,
		// Without it an idle keep-alive connection is held forever: a client could pin
		// goroutines and file descriptors by the thousand. iPXE's requests of one boot
		// follow each other within seconds.
		IdleTimeout:    30 * time.Second,
		MaxHeaderBytes: 16 << 10,
		ErrorLog:       zap.NewStdLog(s.opts.Logger.Named("http")),
	}

	errCh := make(chan error, 1)

	go func() { errCh <- srv.Serve(lis) }()

	select {
	case err := <-errCh:
		if stopped(ctx, err) {
			s.grpc.Stop()

			return nil
		}

		return fmt.Errorf("error serving HTTP: %w", err)
	case <-ctx.Done():
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()

	s.grpc.Stop()

	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}

	if err := <-errCh; !stopped(ctx, err) {
		return fmt.Errorf("error serving HTTP: %w", err)
	}

	return nil
}

// stopped tells a server that stopped with ctx from one that failed. The listener's
// owner may close it as ctx ends (a portmux listener is closed so): Serve then returns
// net.ErrClosed before, or instead of, http.ErrServerClosed.
func stopped(ctx context.Context, err error) bool {
	if err == nil || errors.Is(err, http.ErrServerClosed) {
		return true
	}

	return ctx.Err() != nil && errors.Is(err, net.ErrClosed)
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}

	return host
}
