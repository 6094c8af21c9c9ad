package tftp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"
)

// ClientOptions are what a Get asks for.
type ClientOptions struct {
	// BlockSize is the blksize asked for; 0 asks for none (512-byte blocks).
	BlockSize int
	// WindowSize is the windowsize asked for; 0 asks for none (lock step).
	WindowSize int
	// TransferSize asks for tsize.
	TransferSize bool
	// Timeout is the client's retransmission timeout. Default 1s.
	Timeout time.Duration
	// Retries is how many times an ACK is sent again before giving up. Default 5.
	Retries int
	// Local is the address to send from; unset, the system chooses.
	Local netip.Addr
}

// Result is what a Get received.
type Result struct {
	Bytes int64
	// TransferSize is the size the server announced, -1 without tsize.
	TransferSize int64
	BlockSize    int
	WindowSize   int
	// Reacks is ACKs sent again (after a timeout, a duplicate or a gap).
	Reacks uint64
}

// Get reads the named file from the TFTP server at addr ("host:port") in octet mode
// and writes it to w. It is the client the tests and benchmarks use: RFC 7440 windows,
// which pin/tftp's client does not speak.
func Get(ctx context.Context, addr, name string, o ClientOptions, w io.Writer) (Result, error) {
	server, err := netip.ParseAddrPort(addr)
	if err != nil {
		ua, rerr := net.ResolveUDPAddr("udp", addr)
		if rerr != nil {
			return Result{}, fmt.Errorf("error resolving TFTP server %s: %w", addr, rerr)
		}

		server = ua.AddrPort()
	}

	server = netip.AddrPortFrom(server.Addr().Unmap(), server.Port())

	network := "udp4"
	if server.Addr().Is6() {
		network = "udp6"
	}

	var laddr *net.UDPAddr
	if o.Local.IsValid() {
		laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(o.Local, 0))
	}

	uc, err := net.ListenUDP(network, laddr)
	if err != nil {
		return Result{}, fmt.Errorf("error opening a TFTP client socket: %w", err)
	}

	defer uc.Close()

	stop := context.AfterFunc(ctx, func() { uc.Close() })
	defer stop()

	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}

	if o.Retries <= 0 {
		o.Retries = 5
	}

	var opts []Option
	if o.BlockSize > 0 {
		opts = append(opts, Option{OptBlockSize, strconv.Itoa(o.BlockSize)})
	}

	if o.WindowSize > 0 {
		opts = append(opts, Option{OptWindowSize, strconv.Itoa(o.WindowSize)})
	}

	if o.TransferSize {
		opts = append(opts, Option{OptTransfer, "0"})
	}

	c := &tidConn{c: uc, server: server}
	r := &receiver{conn: c, w: w, timeout: o.Timeout, retries: o.Retries, blockSize: defaultBlockSize, windowSize: 1}
	r.res.TransferSize = -1

	rrq := appendRequest(nil, name, "octet", opts)

	res, err := r.run(func() error {
		_, err := uc.WriteToUDPAddrPort(rrq, server)

		return err
	})
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}

	return res, err
}

// tidConn is the client's socket: it takes replies only from the server's address, and
// after the first one only from the port it came from (the transfer's TID).
type tidConn struct {
	c      *net.UDPConn
	server netip.AddrPort
	tid    netip.AddrPort
}

func (t *tidConn) Write(b []byte) (int, error) {
	if !t.tid.IsValid() {
		return 0, errors.New("no transfer started")
	}

	return t.c.WriteToUDPAddrPort(b, t.tid)
}

func (t *tidConn) Read(b []byte) (int, error) {
	for {
		n, from, err := t.c.ReadFromUDPAddrPort(b)
		if err != nil {
			return 0, err
		}

		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())

		switch {
		case !t.tid.IsValid() && from.Addr() == t.server.Addr():
			t.tid = from
		case from != t.tid:
			// Another sender: tell it, and keep waiting (RFC 1350).
			t.c.WriteToUDPAddrPort(appendError(nil, ErrCodeUnknownTID, "unknown transfer ID"), from) //nolint:errcheck // best effort

			continue
		}

		return n, nil
	}
}

func (t *tidConn) SetReadDeadline(d time.Time) error { return t.c.SetReadDeadline(d) }

// receiver receives a file in windows: it acknowledges the last block of each window,
// the last in-order block when a block is missing or on a timeout, and drops blocks
// after a gap, so the server goes back to the first one missing (RFC 7440).
type receiver struct {
	conn       conn
	w          io.Writer
	timeout    time.Duration
	retries    int
	blockSize  int
	windowSize int

	res Result
}

// run sends the request with start (again on a timeout until a reply comes), then
// receives.
func (r *receiver) run(start func() error) (Result, error) {
	pkt := make([]byte, 4+maxBlockSize)

	// The first reply: an OACK, DATA 1 (no options taken) or an ERROR.
	var n int

	for try := 0; ; try++ {
		if err := start(); err != nil {
			return r.res, fmt.Errorf("error sending the request: %w", err)
		}

		var err error
		if n, err = r.read(pkt); err == nil {
			break
		}

		if !errors.Is(err, os.ErrDeadlineExceeded) || try >= r.retries {
			return r.res, err
		}
	}

	switch op := binary.BigEndian.Uint16(pkt); op {
	case opOACK:
		if err := r.accept(pkt[2:n]); err != nil {
			r.conn.Write(appendError(nil, ErrCodeOptionRefuse, err.Error())) //nolint:errcheck // best effort

			return r.res, err
		}

		return r.res, r.receive(pkt, 0)
	case opDATA:
		return r.res, r.receive(pkt, n)
	case opERROR:
		return r.res, parseError(pkt[2:n])
	default:
		return r.res, fmt.Errorf("unexpected opcode %d in the first reply", op)
	}
}

// accept takes the server's OACK.
func (r *receiver) accept(b []byte) error {
	opts, err := parseOACK(b)
	if err != nil {
		return err
	}

	for _, o := range opts {
		switch o.Name {
		case OptBlockSize:
			if r.blockSize, err = optionInt(o, minBlockSize, maxBlockSize); err != nil {
				return err
			}
		case OptWindowSize:
			if r.windowSize, err = optionInt(o, 1, 65535); err != nil {
				return err
			}
		case OptTransfer:
			v, err := strconv.ParseInt(o.Value, 10, 64)
			if err != nil || v < 0 {
				return fmt.Errorf("invalid tsize %q in OACK", truncate(o.Value))
			}

			r.res.TransferSize = v
		}
	}

	r.res.BlockSize, r.res.WindowSize = r.blockSize, r.windowSize

	return nil
}

// receive receives DATA until the last (short) block. first is the length of a DATA
// packet already in pkt, or 0 when the OACK is to be acknowledged first.
func (r *receiver) receive(pkt []byte, first int) error {
	r.res.BlockSize, r.res.WindowSize = r.blockSize, r.windowSize

	var (
		next     = uint64(1) // next block wanted, not wrapping
		inWindow = 0         // blocks taken since the last ACK
		reacked  = false     // a gap or duplicate already answered since the last progress
		tries    = 0
	)

	ack := func(block uint64) error {
		inWindow = 0

		_, err := r.conn.Write(appendACK(nil, uint16(block))) //nolint:gosec // wraps by design
		if err != nil {
			return fmt.Errorf("error sending ACK: %w", err)
		}

		return nil
	}

	n := first
	if n == 0 {
		if err := ack(0); err != nil {
			return err
		}
	}

	for {
		if n == 0 {
			var err error
			if n, err = r.read(pkt); err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					return err
				}

				if tries++; tries > r.retries {
					return fmt.Errorf("timed out waiting for block %d", next)
				}

				r.res.Reacks++

				if err := ack(next - 1); err != nil {
					return err
				}

				continue
			}
		}

		size := n
		n = 0

		switch binary.BigEndian.Uint16(pkt) {
		case opDATA:
		case opERROR:
			return parseError(pkt[2:size])
		case opOACK:
			// Our ACK of the OACK was lost and the server sent the OACK again.
			if next == 1 && first == 0 {
				r.res.Reacks++

				if err := ack(0); err != nil {
					return err
				}
			}

			continue
		default:
			continue
		}

		if size < 4 || size-4 > r.blockSize {
			return fmt.Errorf("malformed DATA packet of %d bytes", size)
		}

		block := binary.BigEndian.Uint16(pkt[2:])
		if block != uint16(next) { // wraps by design
			// A duplicate (our ACK was lost) or a block after a gap: say once where we are.
			if !reacked {
				reacked = true
				r.res.Reacks++

				if err := ack(next - 1); err != nil {
					return err
				}
			}

			continue
		}

		if _, err := r.w.Write(pkt[4:size]); err != nil {
			return fmt.Errorf("error writing block %d: %w", next, err)
		}

		r.res.Bytes += int64(size - 4)
		inWindow++
		tries = 0
		reacked = false

		last := size-4 < r.blockSize
		if last || inWindow >= r.windowSize {
			if err := ack(next); err != nil {
				return err
			}
		}

		if last {
			return nil
		}

		next++
	}
}

// read reads one packet, waiting at most the timeout.
func (r *receiver) read(pkt []byte) (int, error) {
	if err := r.conn.SetReadDeadline(time.Now().Add(r.timeout)); err != nil {
		return 0, fmt.Errorf("error setting a read deadline: %w", err)
	}

	for {
		n, err := r.conn.Read(pkt)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return 0, err
			}

			return 0, fmt.Errorf("error reading from the server: %w", err)
		}

		if n >= 4 {
			return n, nil
		}
	}
}
