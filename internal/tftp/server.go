package tftp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Errors an OpenFunc wraps to choose the ERROR code the client sees.
var (
	ErrNotFound = errors.New("file not found")
	ErrAccess   = errors.New("access violation")
)

// Errors a Transfer carries for requests refused before the file was opened.
var (
	ErrMalformed = errors.New("malformed request")
	ErrBusy      = errors.New("server busy")
	// ErrClientBusy refuses a request from an address that has MaxTransfersPerClient
	// transfers in progress. It matches ErrBusy too.
	ErrClientBusy = fmt.Errorf("%w: too many transfers from this address", ErrBusy)
)

// Defaults of Config's bounds.
const (
	// defaultMaxTransfers bounds transfers in progress: each holds a socket and a
	// goroutine. Thousands of machines booting at once stay under it.
	defaultMaxTransfers = 4096
	// defaultMaxTransfersPerClient: a machine's firmware fetches one file at a time
	// (UEFI first asks the size in a transfer it ends at the OACK); 4 leaves room for a
	// retry whose first attempt the server still waits on, and keeps one address (a
	// client that asks and never acknowledges) from taking the slots of the others.
	defaultMaxTransfersPerClient = 4
	// defaultMaxStall bounds how long a transfer waits on a client that acknowledges
	// nothing new, whatever Timeout and Retries say: six waits of the longest timeout
	// a client may negotiate (5 s). Then its slot goes back.
	defaultMaxStall = 6 * maxTimeout
)

// OpenFunc opens the file a read request names. It returns the content and its size;
// if the content is an io.Closer it is closed when the transfer ends. Errors wrapping
// ErrNotFound or ErrAccess reach the client as such; any other as a bare "error opening
// file", so no detail of the server's files leaks.
type OpenFunc func(ctx context.Context, req *Request, remote netip.AddrPort) (io.ReaderAt, int64, error)

// Transfer is what became of one request, for metrics and logs.
type Transfer struct {
	Remote netip.AddrPort
	// Request is nil when the datagram did not parse.
	Request    *Request
	BlockSize  int
	WindowSize int
	Size       int64
	// Started is true once the file was opened and its options agreed: an OACK or data
	// went out.
	Started bool
	Stats   Stats
	Took    time.Duration
	// Err is nil for a file sent and acknowledged whole.
	Err error
}

// Config configures a Server.
type Config struct {
	// Open opens requested files. Required.
	Open OpenFunc
	// Done, if set, is called at the end of every request, from the transfer's goroutine.
	Done func(Transfer)
	// Timeout is the retransmission timeout unless the client negotiates one. Default 2s.
	Timeout time.Duration
	// Retries is how many times a packet is sent again before giving up. Default 5.
	Retries int
	// MaxBlockSize is the largest blksize agreed to. Default 1468 (an Ethernet MTU).
	MaxBlockSize int
	// MaxWindowSize is the largest windowsize agreed to. Default 64.
	MaxWindowSize int
	// MaxTransfers bounds transfers in progress; requests beyond it are refused with
	// an ERROR. Default 4096.
	MaxTransfers int
	// MaxTransfersPerClient bounds the transfers in progress from one IP address;
	// requests beyond it are refused with an ERROR (ErrClientBusy). Default 4.
	MaxTransfersPerClient int
	// MaxStall bounds how long a transfer goes on while the client acknowledges
	// nothing new, retries or not. Default 30s.
	MaxStall time.Duration
}

// Server is a read-only TFTP server. Write requests are refused.
type Server struct {
	cfg Config
}

// NewServer checks the configuration.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Open == nil {
		return nil, errors.New("TFTP server without an Open function")
	}

	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}

	if cfg.Retries <= 0 {
		cfg.Retries = 5
	}

	if cfg.MaxBlockSize <= 0 {
		cfg.MaxBlockSize = 1468
	}

	if cfg.MaxBlockSize < minBlockSize || cfg.MaxBlockSize > maxBlockSize {
		return nil, fmt.Errorf("TFTP maximum block size %d is outside %d-%d", cfg.MaxBlockSize, minBlockSize, maxBlockSize)
	}

	if cfg.MaxWindowSize <= 0 {
		cfg.MaxWindowSize = 64
	}

	if cfg.MaxWindowSize > 65535 {
		return nil, fmt.Errorf("TFTP maximum window size %d is above 65535", cfg.MaxWindowSize)
	}

	if cfg.MaxTransfers <= 0 {
		cfg.MaxTransfers = defaultMaxTransfers
	}

	if cfg.MaxTransfersPerClient <= 0 {
		cfg.MaxTransfersPerClient = defaultMaxTransfersPerClient
	}

	if cfg.MaxStall <= 0 {
		cfg.MaxStall = defaultMaxStall
	}

	return &Server{cfg: cfg}, nil
}

// Serve answers requests on conn until ctx is done, then closes conn, stops the
// transfers in progress and waits for them. Each transfer runs on a socket of its own
// (its TID), bound to the address the request was sent to.
func (s *Server) Serve(ctx context.Context, conn *net.UDPConn) error {
	listen, _ := netip.ParseAddrPort(conn.LocalAddr().String()) // zero when unparsable: the kernel chooses
	local := listen.Addr().Unmap()

	if local.IsUnspecified() {
		if err := enableDestination(conn); err != nil {
			conn.Close()

			return err
		}
	}

	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	var wg sync.WaitGroup

	defer wg.Wait()

	slots := make(chan struct{}, s.cfg.MaxTransfers)
	clients := &clientCounts{n: map[netip.Addr]int{}}
	buf := make([]byte, maxRequest+1)
	oob := make([]byte, 128)

	for {
		n, oobn, _, remote, err := conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}

			conn.Close()

			return fmt.Errorf("error reading TFTP requests: %w", err)
		}

		dst := local
		if dst.IsUnspecified() {
			dst = destination(oob[:oobn])
		}

		remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())

		// An ERROR is never answered (RFC 1350): answering one with another could loop
		// forever between two servers, or with one an attacker spoofed.
		if n >= 2 && binary.BigEndian.Uint16(buf) == opERROR {
			s.done(Transfer{Remote: remote, Err: fmt.Errorf("%w: an ERROR packet, not answered", ErrMalformed)})

			continue
		}

		// What is refused is answered from the server's port: no socket or goroutine is
		// spent on garbage.
		req, err := ParseRequest(buf[:n])

		switch {
		case err != nil:
			s.refuse(conn, remote, nil, ErrCodeIllegalOp, fmt.Errorf("%w: %w", ErrMalformed, err))

			continue
		case req.Write:
			s.refuse(conn, remote, req, ErrCodeAccess, errors.New("write requests are refused: read-only server"))

			continue
		case req.Mode != "octet":
			s.refuse(conn, remote, req, ErrCodeIllegalOp, fmt.Errorf("mode %s is not served: use octet", req.Mode))

			continue
		}

		if !clients.take(remote.Addr(), s.cfg.MaxTransfersPerClient) {
			s.refuse(conn, remote, req, ErrCodeUndefined, ErrClientBusy)

			continue
		}

		select {
		case slots <- struct{}{}:
		default:
			clients.give(remote.Addr())
			s.refuse(conn, remote, req, ErrCodeUndefined, ErrBusy)

			continue
		}

		wg.Go(func() {
			defer func() {
				<-slots
				clients.give(remote.Addr())
			}()

			s.transfer(ctx, req, dst, remote)
		})
	}
}

// clientCounts counts the transfers in progress by client address. It holds only
// addresses with a transfer, so it is bounded by MaxTransfers.
type clientCounts struct {
	mu sync.Mutex
	n  map[netip.Addr]int
}

// take counts a transfer for addr, unless addr already has limit.
func (c *clientCounts) take(addr netip.Addr, limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()

	if c.n[addr] >= limit {
		return false
	}

	c.n[addr]++

	return true
}

// give uncounts a transfer of addr.
func (c *clientCounts) give(addr netip.Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if c.n[addr]--; c.n[addr] <= 0 {
		delete(c.n, addr)
	}
}

// refuse answers a request with an ERROR and reports it.
func (s *Server) refuse(c net.PacketConn, remote netip.AddrPort, req *Request, code uint16, err error) {
	c.WriteTo(appendError(nil, code, err.Error()), net.UDPAddrFromAddrPort(remote)) //nolint:errcheck // best effort: the client retries or gives up

	s.done(Transfer{Remote: remote, Request: req, Err: err})
}

func (s *Server) done(t Transfer) {
	if s.cfg.Done != nil {
		s.cfg.Done(t)
	}
}

// transfer answers one read request on a socket of its own.
func (s *Server) transfer(ctx context.Context, req *Request, local netip.Addr, remote netip.AddrPort) {
	start := time.Now()

	var laddr *net.UDPAddr
	if local.IsValid() && !local.IsUnspecified() {
		laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
	}

	c, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(remote))
	if err != nil {
		s.done(Transfer{Remote: remote, Err: fmt.Errorf("error opening a transfer socket: %w", err)})

		return
	}

	defer c.Close()

	// Closing the socket is what interrupts a transfer waiting for an ACK.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	t := Transfer{Remote: remote, Request: req}

	reply := func(code uint16, err error) {
		c.Write(appendError(nil, code, err.Error())) //nolint:errcheck // best effort

		t.Err = err
	}

	defer func() {
		t.Took = time.Since(start)
		s.done(t)
	}()

	src, size, err := s.cfg.Open(ctx, req, remote)
	if err != nil {
		switch {
		case errors.Is(err, ErrNotFound):
			c.Write(appendError(nil, ErrCodeNotFound, ErrNotFound.Error())) //nolint:errcheck // best effort
		case errors.Is(err, ErrAccess):
			c.Write(appendError(nil, ErrCodeAccess, ErrAccess.Error())) //nolint:errcheck // best effort
		default:
			c.Write(appendError(nil, ErrCodeUndefined, "error opening file")) //nolint:errcheck // best effort
		}

		t.Err = err

		return
	}

	if cl, ok := src.(io.Closer); ok {
		defer cl.Close()
	}

	t.Size = size

	p, err := negotiate(req, size, limits{maxBlockSize: s.cfg.MaxBlockSize, maxWindowSize: s.cfg.MaxWindowSize})
	if err != nil {
		reply(ErrCodeOptionRefuse, err)

		return
	}

	t.BlockSize, t.WindowSize, t.Started = p.blockSize, p.windowSize, true

	timeout := s.cfg.Timeout
	if p.timeout > 0 {
		timeout = p.timeout
	}

	snd := newSender(c, src, size, p, timeout, s.cfg.Retries, segmentation(c, 4+p.blockSize, p.windowSize))
	snd.maxStall = s.cfg.MaxStall

	defer func() { t.Stats = snd.stats }()

	if len(p.oack) > 0 {
		if err := snd.sendOACK(p.oack); err != nil {
			t.Err = s.transferError(ctx, err)

			return
		}
	}

	if err := snd.send(); err != nil {
		t.Err = s.transferError(ctx, err)
	}
}

// transferError says why a transfer stopped.
func (s *Server) transferError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("server stopping: %w", ctx.Err())
	}

	return err
}
