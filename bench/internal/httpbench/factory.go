package httpbench

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/siderolabs/image-factory/pkg/schematic"
)

// Factory is an Image Factory stand-in on loopback: the provider registers allocations'
// schematics with it, so that no benchmark traffic leaves the host.
type Factory struct {
	URL        string
	Registered atomic.Int64

	srv *http.Server
}

// StartFactory serves the stand-in on a free loopback port.
func StartFactory() (*Factory, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("error listening for the factory stand-in: %w", err)
	}

	f := &Factory{URL: "http://" + lis.Addr().String()}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 5 * time.Second}

	go f.srv.Serve(lis) //nolint:errcheck

	return f, nil
}

// Close stops the stand-in.
func (f *Factory) Close() error { return f.srv.Close() }

func (f *Factory) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/schematics" {
		http.NotFound(w, r)

		return
	}

	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	sc, err := schematic.Unmarshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	id, err := sc.ID()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)

		return
	}

	f.Registered.Add(1)

	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"id": id}) //nolint:errcheck
}
