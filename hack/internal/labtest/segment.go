package labtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/siderolabs/siderolink/api/events"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	talosmachine "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/anvil-metal/anvil/internal/netns"
)

// SegmentHost is another host on a lab's provisioning network: a namespace on the lab's
// bridge (the site's), which the test's own lab created. Its sockets are opened there, so
// its traffic stays inside the lab; the provider sees it as a stranger's.
type SegmentHost struct {
	NS string
}

// Dial opens a TCP connection from the host.
func (h SegmentHost) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var conn net.Conn

	err := netns.Do(h.NS, func() error {
		var err error

		d := net.Dialer{Timeout: 5 * time.Second}
		conn, err = d.DialContext(ctx, "tcp", addr)

		return err
	})
	if err != nil {
		return nil, fmt.Errorf("error dialing %s from %s: %w", addr, h.NS, err)
	}

	return conn, nil
}

// HTTPClient is a plain HTTP client of the host; it follows no redirect, so what the
// provider answers is what the test sees.
func (h SegmentHost) HTTPClient() *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return h.Dial(ctx, addr)
			},
			MaxIdleConnsPerHost: 8,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// PlainGRPC is a plaintext gRPC client of the host to addr (host:port): Talos' event
// sink speaks it.
func (h SegmentHost) PlainGRPC(addr string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithContextDialer(h.Dial), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("error making a gRPC client of %s: %w", addr, err)
	}

	return conn, nil
}

// InstallRebooted is the event real Talos publishes to its event sink as its install
// sequence ends in the reboot into the installed system: what marks a machine installed.
func InstallRebooted() (*events.EventRequest, error) {
	data, err := anypb.New(&talosmachine.SequenceEvent{
		Sequence: "install", Action: talosmachine.SequenceEvent_NOOP,
		Error: &common.Error{Code: common.Code_FATAL, Message: "sequence failed: error running phase 8 in install sequence: task 1/1: failed, unix.Reboot(45584543)"},
	})
	if err != nil {
		return nil, fmt.Errorf("error encoding the install event: %w", err)
	}

	return &events.EventRequest{Id: "x", Data: data}, nil
}
