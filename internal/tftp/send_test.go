package tftp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fault is what the pipe does with one packet.
type fault int

const (
	deliver fault = iota
	drop
	duplicate
	// hold delays the packet until the next one in the same direction has gone.
	hold
)

// faultFunc decides a packet's fate from its opcode, wire block number and how many
// times the same opcode and block went this way before.
type faultFunc func(op, block uint16, seen int) fault

// pipeEnd is one end of an in-memory datagram pipe that can lose, duplicate and reorder.
type pipeEnd struct {
	in    chan []byte
	peer  *pipeEnd
	fault faultFunc
	// segment, if set, splits writes into datagrams of this size, as UDP_SEGMENT does;
	// with noSegmentation, a write longer than segment fails instead.
	segment        int
	noSegmentation bool

	mu       sync.Mutex
	seen     map[[2]uint16]int
	held     []byte
	deadline time.Time
	closed   chan struct{}
}

func newPipe(toClient, toServer faultFunc) (server, client *pipeEnd) {
	server = &pipeEnd{in: make(chan []byte, 1<<16), fault: toClient, seen: map[[2]uint16]int{}, closed: make(chan struct{})}
	client = &pipeEnd{in: make(chan []byte, 1<<16), fault: toServer, seen: map[[2]uint16]int{}, closed: make(chan struct{})}
	server.peer, client.peer = client, server

	return server, client
}

func (p *pipeEnd) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	if p.noSegmentation && len(b) > p.segment {
		return 0, errors.New("EIO: the device cannot segment")
	}

	// Split as the kernel does a write on a socket with UDP_SEGMENT.
	for p.segment > 0 && len(b) > p.segment {
		p.write(b[:p.segment])
		b = b[p.segment:]
	}

	p.write(b)

	return len(b), nil
}

func (p *pipeEnd) write(b []byte) {
	pkt := append([]byte(nil), b...)

	// Only DATA and ACK carry a block number.
	var op, block uint16
	if len(pkt) >= 4 {
		op = binary.BigEndian.Uint16(pkt)
		if op == opDATA || op == opACK {
			block = binary.BigEndian.Uint16(pkt[2:])
		}
	}

	key := [2]uint16{op, block}
	seen := p.seen[key]
	p.seen[key]++

	f := deliver
	if p.fault != nil {
		f = p.fault(op, block, seen)
	}

	held := p.held
	p.held = nil

	switch f {
	case deliver:
		p.peer.in <- pkt
	case duplicate:
		p.peer.in <- pkt
		p.peer.in <- pkt
	case hold:
		p.held = pkt
	case drop:
	}

	if held != nil {
		p.peer.in <- held
	}
}

func (p *pipeEnd) Read(b []byte) (int, error) {
	select {
	case pkt := <-p.in:
		return copy(b, pkt), nil
	default:
	}

	p.mu.Lock()
	deadline := p.deadline
	p.mu.Unlock()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()

	select {
	case pkt := <-p.in:
		return copy(b, pkt), nil
	case <-timer.C:
		return 0, os.ErrDeadlineExceeded
	case <-p.closed:
		return 0, net.ErrClosed
	}
}

func (p *pipeEnd) SetReadDeadline(t time.Time) error {
	p.mu.Lock()
	p.deadline = t
	p.mu.Unlock()

	return nil
}

// once applies f to the first time a packet of opcode op and wire block goes by.
func once(op, block uint16, f fault) faultFunc {
	return func(o, b uint16, seen int) fault {
		if o == op && b == block && seen == 0 {
			return f
		}

		return deliver
	}
}

func all(fs ...faultFunc) faultFunc {
	return func(op, block uint16, seen int) fault {
		for _, f := range fs {
			if r := f(op, block, seen); r != deliver {
				return r
			}
		}

		return deliver
	}
}

// transferResult is both ends' view of one transfer over a pipe.
type transferResult struct {
	got       []byte
	sendErr   error
	recvErr   error
	stats     Stats
	clientRes Result
}

func pipeTransfer(t *testing.T, file []byte, p params, toClient, toServer faultFunc, timeout time.Duration) transferResult {
	t.Helper()

	return pipeTransferSized(t, file, int64(len(file)), p, toClient, toServer, timeout, 1)
}

// Retransmission timeouts of the pipe's ends: short, so lost packets cost little; a
// clean transfer, asserted to need no retransmission, waits longer so a stall of the
// test machine is not taken for a loss.
// Retries are many, so a loaded test machine that stalls an end for a while does not
// fail a transfer.
var (
	lossyTimeout = 100 * time.Millisecond
	cleanTimeout = time.Second
)

const pipeRetries = 20

// pipeTransferSized sends file as if it were size bytes long, batch DATA packets per
// write.
func pipeTransferSized(t *testing.T, file []byte, size int64, p params, toClient, toServer faultFunc, timeout time.Duration, batch int) transferResult {
	t.Helper()

	server, client := newPipe(toClient, toServer)

	t.Cleanup(func() {
		close(server.closed)
		close(client.closed)
	})

	var (
		res transferResult
		wg  sync.WaitGroup
	)

	server.segment = 4 + p.blockSize
	snd := newSender(server, bytes.NewReader(file), size, p, timeout, pipeRetries, batch)

	wg.Go(func() {
		if len(p.oack) > 0 {
			if res.sendErr = snd.sendOACK(p.oack); res.sendErr != nil {
				return
			}
		}

		res.sendErr = snd.send()
	})

	var buf bytes.Buffer

	r := &receiver{conn: client, w: &buf, timeout: timeout * 3 / 2, retries: pipeRetries, blockSize: 512, windowSize: 1}
	// The sender starts on its own, as after a request: there is none to send.
	res.clientRes, res.recvErr = r.run(func() error { return nil })

	wg.Wait()

	res.got = buf.Bytes()
	res.stats = snd.stats

	return res
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(b) //nolint:errcheck // never fails

	return b
}

func withOptions(blockSize, windowSize int) params {
	p := params{blockSize: blockSize, windowSize: windowSize}
	p.oack = []Option{{OptBlockSize, itoa(blockSize)}, {OptWindowSize, itoa(windowSize)}}

	return p
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}

	return append(b, byte('0'+i%10))
}

func TestWindowedTransfer(t *testing.T) {
	t.Parallel()

	const bs = 512

	for _, tc := range []struct {
		name               string
		size               int
		p                  params
		toClient, toServer faultFunc
		// clean transfers must not send anything twice
		clean         bool
		wantRollbacks bool
	}{
		{name: "lock step, no options", size: 3*bs + 100, p: params{blockSize: bs, windowSize: 1}, clean: true},
		{name: "lock step, blksize", size: 5*1468 + 1, p: withOptions(1468, 1), clean: true},
		{name: "window 8", size: 100*bs + 7, p: withOptions(bs, 8), clean: true},
		{name: "window 16, whole blocks: an empty last block", size: 32 * bs, p: withOptions(bs, 16), clean: true},
		{name: "empty file", size: 0, p: withOptions(bs, 4), clean: true},
		{name: "window larger than the file", size: 3 * bs, p: withOptions(bs, 64), clean: true},
		{
			name: "block lost mid-window: rollback", size: 40 * bs, p: withOptions(bs, 8),
			toClient: once(opDATA, 3, drop), wantRollbacks: true,
		},
		{
			name: "last block of a window lost: client timeout", size: 40 * bs, p: withOptions(bs, 8),
			toClient: once(opDATA, 8, drop), wantRollbacks: true,
		},
		{
			name: "first block of a window lost", size: 40 * bs, p: withOptions(bs, 8),
			toClient: once(opDATA, 9, drop),
		},
		{
			name: "window ACK lost: server timeout", size: 40 * bs, p: withOptions(bs, 8),
			toServer: once(opACK, 16, drop),
		},
		{
			name: "final ACK's window lost", size: 20*bs + 3, p: withOptions(bs, 8),
			toClient: once(opDATA, 21, drop),
		},
		{
			name: "every block duplicated", size: 30 * bs, p: withOptions(bs, 4),
			toClient: func(op, _ uint16, _ int) fault {
				if op == opDATA {
					return duplicate
				}

				return deliver
			},
		},
		{
			name: "every ACK duplicated", size: 30 * bs, p: withOptions(bs, 4),
			toServer: func(op, _ uint16, _ int) fault {
				if op == opACK {
					return duplicate
				}

				return deliver
			},
			clean: true,
		},
		{
			name: "blocks reordered", size: 40 * bs, p: withOptions(bs, 8),
			toClient: all(once(opDATA, 2, hold), once(opDATA, 13, hold)), wantRollbacks: true,
		},
		{
			name: "lock step, block lost", size: 10 * bs, p: params{blockSize: bs, windowSize: 1},
			toClient: once(opDATA, 4, drop),
		},
		{
			name: "lock step, ACK duplicated: no sorcerer's apprentice", size: 10 * bs, p: withOptions(bs, 1),
			toServer: once(opACK, 3, duplicate), clean: true,
		},
		{name: "OACK lost", size: 10 * bs, p: withOptions(bs, 4), toClient: once(opOACK, 0, drop)},
		{name: "ACK of the OACK lost", size: 10 * bs, p: withOptions(bs, 4), toServer: once(opACK, 0, drop)},
		{
			name: "wraparound past 65535 blocks, window 16", size: 8*70000 + 5, p: withOptions(8, 16),
			toClient: all(once(opDATA, 65535, drop), once(opDATA, 0, drop), once(opDATA, 3, drop)),
			toServer: once(opACK, 16, drop), wantRollbacks: true,
		},
		{name: "wraparound, lock step", size: 8 * 66000, p: withOptions(8, 1), clean: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			file := randomBytes(tc.size)
			timeout := lossyTimeout
			if tc.clean {
				timeout = cleanTimeout
			}

			// Batches of DATA packets per write only differ from one with windows.
			batches := []int{1}
			if tc.p.windowSize > 1 {
				batches = append(batches, 3, 16)
			}

			for _, batch := range batches {
				res := pipeTransferSized(t, file, int64(len(file)), tc.p, tc.toClient, tc.toServer, timeout, batch)
				checkTransfer(t, tc.p, file, res, tc.clean, tc.wantRollbacks)

				if batch > 1 && tc.p.windowSize > 1 && tc.size > 2*tc.p.blockSize {
					assert.Less(t, res.stats.Writes, res.stats.Blocks, "batch %d: a write per block", batch)
				}
			}
		})
	}
}

func checkTransfer(t *testing.T, p params, file []byte, res transferResult, clean, wantRollbacks bool) {
	t.Helper()

	require.NoError(t, res.sendErr)
	require.NoError(t, res.recvErr)
	assert.True(t, bytes.Equal(file, res.got), "received %d bytes, want %d, or different content", len(res.got), len(file))
	assert.Equal(t, int64(len(file)), res.stats.Bytes)
	assert.Equal(t, int64(len(file)), res.clientRes.Bytes)
	assert.Equal(t, uint64(len(file)/p.blockSize+1), res.stats.Blocks-res.stats.Retransmits)

	if clean {
		assert.Zero(t, res.stats.Retransmits, "retransmissions")
		assert.Zero(t, res.stats.Timeouts, "timeouts")
	} else {
		assert.NotZero(t, res.stats.Retransmits+res.stats.Timeouts+res.clientRes.Reacks, "a fault left no trace")
	}

	if wantRollbacks {
		assert.NotZero(t, res.stats.Rollbacks, "rollbacks")
	}
}

func TestWindowedTransferFailures(t *testing.T) {
	t.Parallel()

	file := randomBytes(20 * 512)

	t.Run("every block lost", func(t *testing.T) {
		t.Parallel()

		res := pipeTransfer(t, file, withOptions(512, 4), func(op, _ uint16, _ int) fault {
			if op == opDATA {
				return drop
			}

			return deliver
		}, nil, lossyTimeout)

		require.ErrorIs(t, res.sendErr, errTimeout)
		require.Error(t, res.recvErr)
		assert.Contains(t, res.recvErr.Error(), "timed out waiting for block 1")
		assert.Equal(t, uint64(pipeRetries+1), res.stats.Timeouts)
	})

	t.Run("client refuses the OACK", func(t *testing.T) {
		t.Parallel()

		// A windowsize of 0 is not a value a client may accept.
		p := params{blockSize: 512, windowSize: 1, oack: []Option{{OptWindowSize, "0"}}}
		res := pipeTransfer(t, file, p, nil, nil, lossyTimeout)

		require.Error(t, res.recvErr)
		assert.Contains(t, res.recvErr.Error(), "invalid windowsize")

		var re *RemoteError
		require.ErrorAs(t, res.sendErr, &re)
		assert.Equal(t, ErrCodeOptionRefuse, re.Code)
		assert.Zero(t, res.stats.Blocks)
	})

	t.Run("short read of the file", func(t *testing.T) {
		t.Parallel()

		// The file claims more bytes than it has (it shrank after it was opened).
		res := pipeTransferSized(t, file, int64(len(file))+5000, withOptions(512, 4), nil, nil, lossyTimeout, 1)

		require.Error(t, res.sendErr)
		assert.Contains(t, res.sendErr.Error(), "error reading block 21: unexpected EOF")
		require.Error(t, res.recvErr)
	})
}

// TestSegmentationFallback: when the socket cannot segment a batch, the sender goes on
// with a packet per write.
func TestSegmentationFallback(t *testing.T) {
	t.Parallel()

	file := randomBytes(50*512 + 1)
	p := withOptions(512, 8)

	server, client := newPipe(nil, nil)
	t.Cleanup(func() {
		close(server.closed)
		close(client.closed)
	})

	server.segment, server.noSegmentation = 4+512, true
	snd := newSender(server, bytes.NewReader(file), int64(len(file)), p, cleanTimeout, pipeRetries, 8)

	errc := make(chan error, 1)

	go func() {
		err := snd.sendOACK(p.oack)
		if err == nil {
			err = snd.send()
		}

		errc <- err
	}()

	var buf bytes.Buffer

	r := &receiver{conn: client, w: &buf, timeout: cleanTimeout, retries: pipeRetries, blockSize: 512, windowSize: 1}
	_, err := r.run(func() error { return nil })
	require.NoError(t, err)
	require.NoError(t, <-errc)
	assert.True(t, bytes.Equal(file, buf.Bytes()))
	assert.Equal(t, 1, snd.batch)
	assert.Equal(t, snd.stats.Blocks, snd.stats.Writes)
	assert.Zero(t, snd.stats.Retransmits)
}
