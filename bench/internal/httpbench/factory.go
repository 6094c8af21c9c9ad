package httpbench

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/anvil-metal/anvil/internal/labfactory"
)

// Factory is an Image Factory stand-in on loopback: the provider registers allocations'
// schematics with it, so that no benchmark traffic leaves the host.
type Factory struct {
	*labfactory.Factory

	URL string
	srv *http.Server
}

// StartFactory serves the stand-in on a free loopback port.
func StartFactory() (*Factory, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("error listening for the factory stand-in: %w", err)
	}

	f := &Factory{Factory: labfactory.New(), URL: "http://" + lis.Addr().String()}
	f.srv = &http.Server{Handler: f.Factory, ReadHeaderTimeout: 5 * time.Second}

	go f.srv.Serve(lis) //nolint:errcheck // returns ErrServerClosed when Close ends it

	return f, nil
}

// Close stops the stand-in.
func (f *Factory) Close() error { return f.srv.Close() }
