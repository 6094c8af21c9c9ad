// Command lab-factory serves the Image Factory stand-in (internal/labfactory) for the
// lab: the lab runs it in the provider's namespace on 10.77.0.1:8080, with the test
// "Talos" (hack/cmd/talos-standin) as the boot assets, and the Talos and Kubernetes
// versions the lab's Omni offers. It logs every request.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/talosext"
)

func main() {
	listen := flag.String("listen", "10.77.0.1:8080", "address to listen on")
	assets := flag.String("assets", "_out/talos-standin", "boot assets: vmlinuz-amd64 and initramfs-amd64.zst (the imager's output) and metal-amd64.raw; empty: none (schematics and versions only)")
	baseURL := flag.String("base-url", "", "base of the asset URLs in the PXE script (default: the Host the client used)")
	talos := flag.String("talos-versions", strings.Join(labfactory.DefaultTalosVersions, ","), "Talos versions offered (GET /versions), comma-separated")
	talosAssets := flag.String("talos-assets", "", "real Talos (make talos: _out/talos/assets), served for the version its talos.json names beside the stand-in's; empty: none")
	talosWork := flag.String("talos-work", "", "where per-schematic initramfs and installer layers of real Talos are made (default: a temporary directory)")
	kubernetes := flag.String("kubernetes-versions", strings.Join(labfactory.DefaultKubernetesVersions, ","), "Kubernetes versions offered (the registry's siderolabs/kubelet tags), comma-separated")

	var extensions []string

	flag.Func("extension", "NAME=DIR: a system extension schematics of real Talos may name as NAME, from the OCI image layout DIR "+
		"(make agent-extension: anvil-metal/metal-agent=_out/agent-extension); repeatable; needs --talos-assets", func(s string) error {
		extensions = append(extensions, s)

		return nil
	})
	flag.Parse()

	if len(extensions) > 0 && *talosAssets == "" {
		fmt.Fprintln(os.Stderr, "error: --extension is for real Talos' schematics: it needs --talos-assets")
		os.Exit(1)
	}

	opts := []labfactory.Option{
		labfactory.WithTalosVersions(splitList(*talos)...),
		labfactory.WithKubernetesVersions(splitList(*kubernetes)...),
	}

	if *assets != "" {
		opts = append(opts, labfactory.WithAssets(*assets))
	}

	if *talosAssets != "" {
		opt, cleanup, err := realTalos(*talosAssets, *talosWork, extensions)
		if err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}

		defer cleanup()

		opts = append(opts, opt)
	}

	if *baseURL != "" {
		opts = append(opts, labfactory.WithBaseURL(*baseURL))
	}

	if err := run(*listen, *assets, opts); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// realTalos serves real Talos from assets, its per-schematic files made in work (a
// temporary directory, removed by cleanup, when empty), with the extensions.
func realTalos(assets, work string, extensions []string) (labfactory.Option, func(), error) {
	cleanup := func() {}

	if work == "" {
		tmp, err := os.MkdirTemp("", "lab-factory-")
		if err != nil {
			return nil, nil, err
		}

		work, cleanup = tmp, func() { os.RemoveAll(tmp) }
	}

	t, err := labfactory.NewTalos(assets, work)
	if err == nil {
		err = addExtensions(t, extensions, filepath.Join(work, "extensions"))
	}

	if err != nil {
		cleanup()

		return nil, nil, err
	}

	return labfactory.WithTalos(t), cleanup, nil
}

// addExtensions lets real Talos' schematics name each NAME=DIR extension: the system
// extension image in the OCI image layout DIR, unpacked under work as Talos loads it
// (talosext.FromLayout), then laid over Talos for the schematics that name it as the
// Image Factory lays an extension image from its registry.
func addExtensions(t *labfactory.Talos, specs []string, work string) error {
	if err := os.RemoveAll(work); err != nil {
		return err
	}

	for i, spec := range specs {
		name, dir, ok := strings.Cut(spec, "=")
		if !ok || name == "" || dir == "" {
			return fmt.Errorf("--extension %q: want NAME=DIR", spec)
		}

		ext, err := talosext.FromLayout(dir, filepath.Join(work, strconv.Itoa(i)), "amd64")
		if err != nil {
			return fmt.Errorf("--extension %s: %w", name, err)
		}

		t.WithExtension(name, ext)
		log.Printf("lab-factory: extension %s is %s %s (%s)", name, ext.Metadata.Name, ext.Metadata.Version, dir)
	}

	return nil
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var items []string

	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}

	return items
}

func run(listen, assets string, opts []labfactory.Option) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	factory := labfactory.New(opts...)

	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("error listening on %s: %w", listen, err)
	}

	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &recorder{ResponseWriter: w, status: http.StatusOK}
			start := time.Now()
			factory.ServeHTTP(rec, r)
			log.Printf("%s %s %s → %d (%d bytes, %s)", r.RemoteAddr, r.Method, r.URL.Path, rec.status, rec.bytes, time.Since(start).Round(time.Millisecond)) //nolint:gosec // the lab's own request log, from the lab's machines
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}

	log.Printf("lab-factory: serving %s on http://%s", assets, listen)

	go func() {
		<-ctx.Done()

		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		_ = srv.Shutdown(shutdown) // Serve below returns; what is left open past the timeout goes with the process
	}()

	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}

	return nil
}

type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)

	return n, err
}
