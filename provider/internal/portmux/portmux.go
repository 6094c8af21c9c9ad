// Package portmux serves TLS and plaintext on one port: it tells a connection's protocol
// by its first byte (a TLS handshake record starts with 0x16; HTTP and HTTP/2's preface
// start with a letter), so machines reach every provider API at one address.
package portmux

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// tlsHandshake is the first byte of a TLS connection (record type handshake).
const tlsHandshake = 0x16

// peekTimeout bounds how long a silent connection may hold its goroutine.
const peekTimeout = 10 * time.Second

// Accept's back-off after a failure that passes (out of file descriptors: a flood of
// connections, or a leak, must not stop the API port for good): the first wait, doubled
// at each failure in a row up to the longest, as net/http's Server does.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// Mux splits one listener into a TLS and a plaintext listener.
type Mux struct {
	root  net.Listener
	tls   *listener
	plain *listener
}

// New returns the mux; Run accepts.
func New(root net.Listener) *Mux {
	return &Mux{
		root:  root,
		tls:   newListener(root.Addr()),
		plain: newListener(root.Addr()),
	}
}

// TLS returns the listener of TLS connections.
func (m *Mux) TLS() net.Listener { return m.tls }

// Plain returns the listener of every other connection.
func (m *Mux) Plain() net.Listener { return m.plain }

// Run accepts connections until ctx is done or the root listener fails, then closes
// everything. A failure that passes (too many open files, a connection aborted before it
// was accepted) is waited out, backing off, and accepting goes on.
func (m *Mux) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { m.root.Close() })
	defer stop()

	defer m.tls.Close()
	defer m.plain.Close()

	var backoff time.Duration

	for {
		conn, err := m.root.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}

			if !temporary(err) {
				return err
			}

			backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)

			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}

			continue
		}

		backoff = 0

		go m.route(conn)
	}
}

// temporary reports whether an Accept error passes: the process or the system is out
// of file descriptors or buffers, or a client gave up before it was accepted. The
// pending connections wait in the listen queue meanwhile.
func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}

	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, errno) {
			return true
		}
	}

	return false
}

func (m *Mux) route(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(peekTimeout)) // fails only on a closed conn, which the read then reports

	r := bufio.NewReaderSize(conn, 512)

	first, err := r.Peek(1)
	if err != nil {
		conn.Close()

		return
	}

	_ = conn.SetReadDeadline(time.Time{}) // as above

	target := m.plain
	if first[0] == tlsHandshake {
		target = m.tls
	}

	target.deliver(&peekedConn{Conn: conn, r: r})
}

// peekedConn reads first what was peeked.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// ReadFrom passes writes from a reader to the connection's own ReadFrom: net/http
// copies a served *os.File (boot assets) through it, and a TCP connection's ReadFrom is
// sendfile(2). Without it the embedded net.Conn hides it, and every response body goes
// through a userspace buffer.
func (c *peekedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}

	return io.Copy(writerOnly{c.Conn}, r)
}

// writerOnly hides every method of a writer but Write, so that io.Copy cannot loop back
// into ReadFrom.
type writerOnly struct{ io.Writer }

type listener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newListener(addr net.Addr) *listener {
	return &listener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *listener) deliver(conn net.Conn) {
	select {
	case l.conns <- conn:
	case <-l.closed:
		conn.Close()
	}
}

// Accept implements net.Listener.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case conn := <-l.conns:
		return conn, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *listener) Close() error {
	l.once.Do(func() { close(l.closed) })

	return nil
}

// Addr implements net.Listener.
func (l *listener) Addr() net.Addr { return l.addr }
