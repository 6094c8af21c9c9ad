// Package portmux serves TLS and plaintext on one port: it tells a connection's protocol
// by its first byte (a TLS handshake record starts with 0x16; HTTP and HTTP/2's preface
// start with a letter), so machines reach every provider API at one address. Of TLS
// connections, it tells gRPC's (a client that offers HTTP/2 alone, by ALPN) from HTTPS
// (any other client: Talos fetching its configuration, a browser, curl) by the client's
// hello, read by crypto/tls and left for the server that takes the connection.
package portmux

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
)

const (
	// tlsHandshake is the first byte of a TLS connection (record type handshake).
	tlsHandshake = 0x16
	// recordHeader is a TLS record's header: type, version, length.
	recordHeader = 5
	// maxHelloRecord bounds the record read for the client's hello: TLS' largest
	// plaintext record (RFC 8446 5.1). A hello in more records than one is gRPC's.
	maxHelloRecord = 1 << 14
)

// peekTimeout bounds how long a silent connection may hold its goroutine.
const peekTimeout = 10 * time.Second

// Accept's back-off after a failure that passes (out of file descriptors: a flood of
// connections, or a leak, must not stop the API port for good): the first wait, doubled
// at each failure in a row up to the longest, as net/http's Server does.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// Mux splits one listener into a gRPC-over-TLS, an HTTPS and a plaintext listener.
type Mux struct {
	root  net.Listener
	tls   *listener
	https *listener
	plain *listener
}

// New returns the mux; Run accepts.
func New(root net.Listener) *Mux {
	return &Mux{
		root:  root,
		tls:   newListener(root.Addr()),
		https: newListener(root.Addr()),
		plain: newListener(root.Addr()),
	}
}

// TLS returns the listener of TLS connections of clients that offer HTTP/2 alone (gRPC),
// and of those whose hello could not be read in one record.
func (m *Mux) TLS() net.Listener { return m.tls }

// HTTPS returns the listener of every other TLS connection.
func (m *Mux) HTTPS() net.Listener { return m.https }

// Plain returns the listener of every other connection.
func (m *Mux) Plain() net.Listener { return m.plain }

// Run accepts connections until ctx is done or the root listener fails, then closes
// everything. A failure that passes (too many open files, a connection aborted before it
// was accepted) is waited out, backing off, and accepting goes on.
func (m *Mux) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { m.root.Close() })
	defer stop()

	defer m.tls.Close()
	defer m.https.Close()
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

	if first[0] != tlsHandshake {
		_ = conn.SetReadDeadline(time.Time{}) // as above

		m.plain.deliver(&peekedConn{Conn: conn, r: r})

		return
	}

	hello, err := readRecord(r)
	if err != nil {
		conn.Close()

		return
	}

	_ = conn.SetReadDeadline(time.Time{}) // as above

	target := m.tls
	if protos, ok := offeredProtocols(hello); ok && !grpcOnly(protos) {
		target = m.https
	}

	// The server that takes the connection reads the hello again, then the rest.
	target.deliver(&peekedConn{Conn: conn, r: io.MultiReader(bytes.NewReader(hello), r)})
}

// readRecord reads the TLS record that starts r: the client's hello, most often whole.
// One longer than maxHelloRecord is left unread (and nil returned with no error).
func readRecord(r *bufio.Reader) ([]byte, error) {
	header, err := r.Peek(recordHeader)
	if err != nil {
		return nil, err //nolint:wrapcheck // the connection is closed on any error
	}

	n := int(binary.BigEndian.Uint16(header[3:]))
	if n > maxHelloRecord {
		return nil, nil
	}

	record := make([]byte, recordHeader+n)
	if _, err = io.ReadFull(r, record); err != nil {
		return nil, err //nolint:wrapcheck // as above
	}

	return record, nil
}

// errHelloRead stops the handshake once crypto/tls has read the client's hello.
var errHelloRead = errors.New("hello read")

// offeredProtocols is the ALPN protocols a client's hello offers, as crypto/tls reads
// them; false when the record is not a whole hello it can read.
func offeredProtocols(record []byte) ([]string, bool) {
	if record == nil {
		return nil, false
	}

	var (
		protos []string
		read   bool
	)

	srv := tls.Server(helloConn{r: bytes.NewReader(record)}, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			protos, read = slices.Clone(hello.SupportedProtos), true

			return nil, errHelloRead
		},
	})
	_ = srv.Handshake() // always fails: errHelloRead, or the hello could not be read

	return protos, read
}

// grpcOnly says whether a client offers HTTP/2 and nothing else: gRPC's clients do (it
// needs HTTP/2); an HTTP client offers HTTP/1.1 too, or nothing.
func grpcOnly(protos []string) bool {
	return len(protos) == 1 && protos[0] == "h2"
}

// helloConn is a connection that reads a recorded hello and writes nowhere, for
// crypto/tls to read the hello with.
type helloConn struct {
	r io.Reader
}

var _ net.Conn = helloConn{}

func (c helloConn) Read(b []byte) (int, error)     { return c.r.Read(b) }
func (helloConn) Write(b []byte) (int, error)      { return len(b), nil }
func (helloConn) Close() error                     { return nil }
func (helloConn) SetDeadline(time.Time) error      { return nil }
func (helloConn) SetReadDeadline(time.Time) error  { return nil }
func (helloConn) SetWriteDeadline(time.Time) error { return nil }
func (helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// peekedConn reads first what was peeked.
type peekedConn struct {
	net.Conn
	r io.Reader
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
