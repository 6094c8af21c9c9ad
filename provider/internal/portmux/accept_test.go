package portmux_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/portmux"
)

// failingListener fails its first Accepts with err, then hands out conn, then waits to
// be closed.
type failingListener struct {
	err   error
	fails int
	conn  net.Conn

	mu     sync.Mutex
	calls  []time.Time
	closed chan struct{}
	once   sync.Once
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls = append(l.calls, time.Now())
	n := len(l.calls)
	l.mu.Unlock()

	switch {
	case n <= l.fails:
		return nil, l.err
	case n == l.fails+1:
		return l.conn, nil
	}

	<-l.closed

	return nil, net.ErrClosed
}

func (l *failingListener) Close() error {
	l.once.Do(func() { close(l.closed) })

	return nil
}

func (l *failingListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50042}
}

func (l *failingListener) accepts() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()

	return append([]time.Time(nil), l.calls...)
}

// acceptError is an Accept error as the net package returns it.
func acceptError(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// TestAcceptSurvivesTemporaryErrors: out of file descriptors (a flood of connections),
// the mux backs off and accepts again; the connection that comes next is served.
func TestAcceptSurvivesTemporaryErrors(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name  string
		err   error
		fails int
	}{
		{"EMFILE", acceptError(syscall.EMFILE), 4},
		{"ENFILE", acceptError(syscall.ENFILE), 2},
		{"ECONNABORTED", acceptError(syscall.ECONNABORTED), 1},
		{"ENOBUFS", acceptError(syscall.ENOBUFS), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			server, client := net.Pipe()
			t.Cleanup(func() { client.Close() })

			root := &failingListener{err: tc.err, fails: tc.fails, conn: server, closed: make(chan struct{})}
			mux := portmux.New(root)

			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)

			go func() { done <- mux.Run(ctx) }()

			go func() { _, _ = io.WriteString(client, "GET / HTTP/1.1\r\n\r\n") }()

			accepted := make(chan net.Conn, 1)

			go func() {
				if c, err := mux.Plain().Accept(); err == nil {
					accepted <- c
				}
			}()

			select {
			case c := <-accepted:
				buf := make([]byte, 3)
				_, err := io.ReadFull(c, buf)
				require.NoError(t, err)
				assert.Equal(t, "GET", string(buf))
			case err := <-done:
				t.Fatalf("Run returned %v: the connection after the errors is never served", err)
			case <-time.After(5 * time.Second):
				t.Fatal("the connection after the errors was not served")
			}

			// Each wait doubles from 5 ms: no busy loop on a failing Accept.
			calls := root.accepts()
			require.GreaterOrEqual(t, len(calls), tc.fails+1)

			for i := 1; i <= tc.fails; i++ {
				want := 5 * time.Millisecond << (i - 1)
				assert.GreaterOrEqual(t, calls[i].Sub(calls[i-1]), want, "wait %d", i)
			}

			cancel()
			require.NoError(t, <-done)
		})
	}

	t.Run("a lasting failure ends Run", func(t *testing.T) {
		t.Parallel()

		broken := errors.New("listener broken")
		root := &failingListener{err: broken, fails: 1, closed: make(chan struct{})}

		require.ErrorIs(t, portmux.New(root).Run(t.Context()), broken)
	})
}
