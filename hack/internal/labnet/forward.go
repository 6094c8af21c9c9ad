package labnet

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/internal/netns"
)

// Forward joins each connection lis accepts to target inside network namespace ns (each
// dialled from a thread in the namespace), until ctx is done or lis fails: how the host
// reaches a service of the lab's, the provider's web console say. It closes lis and
// waits for its connections before it returns.
func Forward(ctx context.Context, lis net.Listener, ns, target string, logf func(format string, args ...any)) error {
	stop := context.AfterFunc(ctx, func() { lis.Close() })
	defer stop()

	var conns sync.WaitGroup
	defer conns.Wait()

	for {
		client, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}

			return err
		}

		conns.Add(1)

		go func() {
			defer conns.Done()
			defer client.Close()

			var server net.Conn

			if err := netns.Do(ns, func() error {
				var err error

				server, err = net.DialTimeout("tcp", target, 10*time.Second)

				return err
			}); err != nil {
				logf("forwarder: dialing %s in %s: %v", target, ns, err)

				return
			}

			defer server.Close()

			// Either side closing ends both: closing unblocks the other copy, and so
			// does the forwarder stopping.
			done := make(chan struct{}, 2)

			go func() { io.Copy(server, client); done <- struct{}{} }() //nolint:errcheck // a closed connection ends the copy
			go func() { io.Copy(client, server); done <- struct{}{} }() //nolint:errcheck // likewise

			select {
			case <-done:
			case <-ctx.Done():
			}

			client.Close()
			server.Close()
			<-done
		}()
	}
}
