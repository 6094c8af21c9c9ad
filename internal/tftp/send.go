package tftp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// conn is one transfer's datagram socket, connected to the peer: a *net.UDPConn, or an
// in-memory pipe in tests.
type conn interface {
	Write(b []byte) (int, error)
	Read(b []byte) (int, error)
	SetReadDeadline(t time.Time) error
}

// Stats count what a transfer sent.
type Stats struct {
	// Bytes is how much of the file the client acknowledged.
	Bytes int64
	// Blocks is DATA packets sent, retransmissions included.
	Blocks uint64
	// Writes is the writes that sent them: fewer than Blocks when the socket segments
	// a window's packets (UDP segmentation offload).
	Writes uint64
	// Retransmits is DATA packets sent again, after a timeout or a window rollback.
	Retransmits uint64
	// Timeouts is waits for an ACK that ran out.
	Timeouts uint64
	// Rollbacks is windows the client acknowledged only in part (a block lost or out of
	// order), so sending restarted after its last in-order block.
	Rollbacks uint64
}

// sender sends one file over conn in windows of blocks (RFC 7440; a window of 1 is RFC
// 1350's lock step).
type sender struct {
	conn       conn
	src        io.ReaderAt
	size       int64
	blockSize  int
	windowSize int
	timeout    time.Duration
	retries    int
	// batch is how many DATA packets one write may carry: above 1, the socket splits a
	// write into datagrams of 4+blockSize bytes (UDP segmentation offload), so a window
	// costs one system call instead of one per block.
	batch int
	// maxStall, when above 0, bounds how long the client may acknowledge nothing new,
	// whatever the timeout and retries: past it the transfer gives up. progress is when
	// it last did (or the transfer started).
	maxStall time.Duration
	progress time.Time

	buf   []byte // DATA packets, back to back
	in    []byte // a received packet
	stats Stats
}

func newSender(c conn, src io.ReaderAt, size int64, p params, timeout time.Duration, retries, batch int) *sender {
	batch = max(min(batch, p.windowSize), 1)

	return &sender{
		conn: c, src: src, size: size,
		blockSize: p.blockSize, windowSize: p.windowSize,
		timeout: timeout, retries: retries, batch: batch, progress: time.Now(),
		buf: make([]byte, batch*(4+p.blockSize)),
		// Anything longer than an ACK or a short ERROR is not read whole, and need not be.
		in: make([]byte, 516),
	}
}

// errTimeout is a transfer that ran out of retries, or of time without progress.
var errTimeout = errors.New("timed out waiting for the client")

// deadline is when a wait for an ACK ends: a timeout from now, and no later than the
// stall bound allows.
func (s *sender) deadline() time.Time {
	d := time.Now().Add(s.timeout)

	if s.maxStall > 0 {
		if end := s.progress.Add(s.maxStall); end.Before(d) {
			return end
		}
	}

	return d
}

// stalled reports whether the client has acknowledged nothing new for maxStall.
func (s *sender) stalled() bool {
	return s.maxStall > 0 && time.Since(s.progress) >= s.maxStall
}

// sendOACK sends the option acknowledgement until the client acknowledges it with ACK 0.
func (s *sender) sendOACK(oack []Option) error {
	pkt := appendOACK(nil, oack)

	for try := 0; ; try++ {
		if _, err := s.conn.Write(pkt); err != nil {
			return fmt.Errorf("error sending OACK: %w", err)
		}

		deadline := s.deadline()

		for {
			block, err := s.readACK(deadline)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}

			if err != nil {
				return err
			}

			if block == 0 {
				s.progress = time.Now()

				return nil
			}
		}

		s.stats.Timeouts++
		if try >= s.retries || s.stalled() {
			return errTimeout
		}
	}
}

// send sends the file, then returns once the client has acknowledged its last block.
// Blocks are numbered from 1 and their 16-bit wire numbers wrap from 65535 to 0; acked
// and sent count blocks without wrapping, and an ACK is placed in the window it can
// belong to, so a file of any length is sent.
func (s *sender) send() error {
	// The last block is the first short one: a file of a whole number of blocks ends
	// with an empty one.
	last := uint64(s.size)/uint64(s.blockSize) + 1 //nolint:gosec // size is a file's, not negative
	acked := uint64(0)
	tries := 0
	highest := uint64(0)

	for acked < last {
		sent := min(acked+uint64(s.windowSize), last) //nolint:gosec // 1..65535

		if err := s.sendBlocks(acked+1, sent); err != nil {
			return err
		}

		if highest > acked {
			s.stats.Retransmits += min(highest, sent) - acked
		}

		highest = max(highest, sent)

		progressed, err := s.waitACK(&acked, sent)
		if err != nil {
			return err
		}

		if progressed {
			tries = 0
			s.progress = time.Now()

			if acked < sent {
				s.stats.Rollbacks++
			}

			continue
		}

		s.stats.Timeouts++

		if tries++; tries > s.retries || s.stalled() {
			return errTimeout
		}
	}

	s.stats.Bytes = s.size

	return nil
}

// waitACK waits up to the timeout (or the stall bound) for an ACK that moves acked forward within
// (acked, sent]. An ACK of acked itself (a duplicate) or outside the window (a stale
// one) is ignored: answering duplicates with data is how the Sorcerer's Apprentice
// syndrome starts. It returns false when the wait ran out.
func (s *sender) waitACK(acked *uint64, sent uint64) (bool, error) {
	deadline := s.deadline()

	for {
		block, err := s.readACK(deadline)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false, nil
		}

		if err != nil {
			return false, err
		}

		ahead := uint64(block - uint16(*acked)) //nolint:gosec // the wire number is the low 16 bits
		if ahead == 0 || ahead > sent-*acked {
			continue
		}

		*acked += ahead

		return true, nil
	}
}

// sendBlocks sends blocks from..to (1-based, inclusive), batch at a time.
func (s *sender) sendBlocks(from, to uint64) error {
	for first := from; first <= to; {
		last := min(first+uint64(s.batch)-1, to) //nolint:gosec // batch is 1..65535

		n := 0

		for b := first; b <= last; b++ {
			m, err := s.fillBlock(s.buf[n:n+4+s.blockSize], b)
			if err != nil {
				return err
			}

			n += m
		}

		if _, err := s.conn.Write(s.buf[:n]); err != nil {
			if s.batch == 1 {
				return fmt.Errorf("error sending block %d: %w", first, err)
			}

			// The route's device cannot segment (or not this size): one block per write
			// from now on.
			s.batch = 1

			continue
		}

		s.stats.Blocks += last - first + 1
		s.stats.Writes++
		first = last + 1
	}

	return nil
}

// fillBlock writes DATA packet b (1-based) into p and returns its length. Only the
// file's last block is short.
func (s *sender) fillBlock(p []byte, b uint64) (int, error) {
	off := int64(b-1) * int64(s.blockSize) //nolint:gosec // bounded by the file size

	n := 0
	if off < s.size {
		want := int(min(int64(s.blockSize), s.size-off))

		var err error
		if n, err = s.src.ReadAt(p[4:4+want], off); n < want {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}

			return 0, fmt.Errorf("error reading block %d: %w", b, err)
		}
	}

	binary.BigEndian.PutUint16(p, opDATA)
	binary.BigEndian.PutUint16(p[2:], uint16(b)) //nolint:gosec // wraps by design

	return 4 + n, nil
}

// readACK reads until an ACK arrives (its block number), an ERROR arrives (a
// *RemoteError), the deadline passes (os.ErrDeadlineExceeded) or the socket fails.
// Other packets are ignored.
func (s *sender) readACK(deadline time.Time) (uint16, error) {
	if err := s.conn.SetReadDeadline(deadline); err != nil {
		return 0, fmt.Errorf("error setting a read deadline: %w", err)
	}

	for {
		n, err := s.conn.Read(s.in)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return 0, err
			}

			return 0, fmt.Errorf("error reading from the client: %w", err)
		}

		if n < 4 {
			continue
		}

		switch binary.BigEndian.Uint16(s.in) {
		case opACK:
			return binary.BigEndian.Uint16(s.in[2:]), nil
		case opERROR:
			return 0, parseError(s.in[2:n])
		}
	}
}
