package kmsglog

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/go-kmsg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/anvil-metal/anvil/internal/freeport"
)

var boot = time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)

// fakeReader is the kernel log: the test feeds it records.
type fakeReader struct {
	ch     chan kmsg.Packet
	closed atomic.Bool
}

func newFakeReader() *fakeReader { return &fakeReader{ch: make(chan kmsg.Packet)} }

func (f *fakeReader) Scan(context.Context) <-chan kmsg.Packet { return f.ch }

func (f *fakeReader) Close() error {
	f.closed.Store(true)

	return nil
}

// feed hands the shipper record n (it takes it when it is ready for the next).
func (f *fakeReader) feed(t *testing.T, n int) {
	t.Helper()

	select {
	case f.ch <- kmsg.Packet{Message: message(n)}:
	case <-time.After(20 * time.Second):
		t.Fatalf("the shipper never took record %d", n)
	}
}

func message(n int) kmsg.Message {
	return kmsg.Message{
		Message: fmt.Sprintf("record %d", n), Facility: kmsg.Kern, Priority: kmsg.Info,
		SequenceNumber: int64(n), Clock: int64(n) * 1000, Timestamp: boot.Add(time.Duration(n) * time.Millisecond),
	}
}

// TestEncode: the line Talos' JSON-lines sender writes for the same record.
func TestEncode(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		m    kmsg.Message
		want string
	}{
		{
			name: "kernel",
			m: kmsg.Message{
				Message: "virtio_net virtio0 enp0s2: renamed from eth0", Facility: kmsg.Kern, Priority: kmsg.Info,
				SequenceNumber: 412, Clock: 1523042, Timestamp: time.Date(2026, 12, 1, 17, 0, 1, 523042000, time.UTC),
			},
			want: `{"clock":1523042,"facility":"kern","msg":"virtio_net virtio0 enp0s2: renamed from eth0","priority":"info","seq":412,` +
				`"talos-level":"info","talos-time":"2026-12-01T17:00:01.523042Z"}`,
		},
		{
			name: "the agent's own line",
			m:    kmsg.Message{Message: `[   12.345] WARN  link  no lease {"link": "eth0"} <&>`, Facility: kmsg.User, Priority: kmsg.Warning, SequenceNumber: 9, Timestamp: boot},
			want: `{"clock":0,"facility":"user","msg":"[   12.345] WARN  link  no lease {\"link\": \"eth0\"} \u003c\u0026\u003e","priority":"warning","seq":9,` +
				`"talos-level":"warn","talos-time":"2026-12-01T17:00:00Z"}`,
		},
		{
			name: "levels",
			m:    kmsg.Message{Message: "x", Facility: kmsg.Daemon, Priority: kmsg.Crit, Timestamp: boot},
			want: `{"clock":0,"facility":"daemon","msg":"x","priority":"crit","seq":0,"talos-level":"error","talos-time":"2026-12-01T17:00:00Z"}`,
		},
		{
			// A facility no syslog name covers (a process wrote "<1000>..."): named by number,
			// where kmsg.Facility.String would panic.
			name: "facility out of range",
			m:    kmsg.Message{Message: "x", Facility: 125, Priority: kmsg.Notice, Timestamp: boot},
			want: `{"clock":0,"facility":"125","msg":"x","priority":"notice","seq":0,"talos-level":"info","talos-time":"2026-12-01T17:00:00Z"}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			b, err := encode(tc.m)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(b))
		})
	}

	for p := kmsg.Emerg; p <= kmsg.Debug; p++ {
		assert.Equal(t, p.String(), priority(p))
	}

	for f := kmsg.Kern; f <= kmsg.Local7; f++ {
		assert.Equal(t, f.String(), facility(f))
	}
}

// line is one shipped record, decoded.
type line struct {
	Msg        string `json:"msg"`
	TalosTime  string `json:"talos-time"`
	TalosLevel string `json:"talos-level"`
	Facility   string `json:"facility"`
	Seq        int64  `json:"seq"`
	Clock      int64  `json:"clock"`
	Priority   string `json:"priority"`
}

func decode(t *testing.T, s string) line {
	t.Helper()

	var l line
	require.NoError(t, json.Unmarshal([]byte(s), &l), s)

	return l
}

func runShipper(t *testing.T, u string, r *fakeReader, logger *zap.Logger, onLost ...func(error)) (cancel func(), done <-chan error) {
	t.Helper()

	dest, err := url.Parse(u)
	require.NoError(t, err)

	ctx, stop := context.WithCancel(t.Context())
	ch := make(chan error, 1)

	go func() {
		opts := Options{URL: dest, Reader: r, Logger: logger, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
		if len(onLost) > 0 {
			opts.OnLost = onLost[0]
		}

		ch <- Run(ctx, opts)
	}()

	return stop, ch
}

// TestTCPLinesAndReconnect: each record is one JSON line; when the receiver drops the
// connection (Omni restarting), the shipper dials again and goes on.
func TestTCPLinesAndReconnect(t *testing.T) {
	t.Parallel()

	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)

	defer lis.Close()

	r := newFakeReader()
	cancel, done := runShipper(t, "tcp://"+lis.Addr().String(), r, zap.NewNop())

	r.feed(t, 1)
	r.feed(t, 2)

	first, err := lis.Accept()
	require.NoError(t, err)

	in := bufio.NewReader(first)

	for n := 1; n <= 2; n++ {
		s, err := in.ReadString('\n')
		require.NoError(t, err)

		got := decode(t, s)
		assert.Equal(t, line{
			Msg: fmt.Sprintf("record %d", n), TalosTime: boot.Add(time.Duration(n) * time.Millisecond).Format(time.RFC3339Nano),
			TalosLevel: "info", Facility: "kern", Seq: int64(n), Clock: int64(n) * 1000, Priority: "info",
		}, got)
	}

	// The receiver goes away. A record or so may go into the dead connection before the
	// shipper learns of it (as with Talos); those after reach the new connection.
	first.Close()

	go func() {
		for n := 3; n <= 6; n++ {
			r.feed(t, n)
		}
	}()

	second, err := lis.Accept()
	require.NoError(t, err)

	defer second.Close()

	in = bufio.NewReader(second)
	last := int64(2)

	for last < 6 {
		s, err := in.ReadString('\n')
		require.NoError(t, err)

		got := decode(t, s)
		assert.Greater(t, got.Seq, last, "in order, none twice")
		last = got.Seq
	}

	cancel()
	require.NoError(t, <-done)
	assert.True(t, r.closed.Load(), "the kernel log is closed")
}

// TestUnreachableThenUp: while the destination refuses (SideroLink not up yet), the
// record waits and the outage is logged once; once it listens, the record goes.
func TestUnreachableThenUp(t *testing.T) {
	t.Parallel()

	port, err := freeport.TCP()
	require.NoError(t, err)

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	core, logs := observer.New(zapcore.DebugLevel)
	r := newFakeReader()
	cancel, done := runShipper(t, "tcp://"+addr, r, zap.New(core))

	r.feed(t, 1)

	require.Eventually(t, func() bool {
		return logs.FilterMessage("the kernel log's destination is unreachable; retrying").Len() == 1
	},
		10*time.Second, time.Millisecond)
	time.Sleep(100 * time.Millisecond) // several retries, 20 ms apart at most

	assert.Equal(t, 1, logs.FilterMessage("the kernel log's destination is unreachable; retrying").Len(), "one line per outage")

	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", addr)
	require.NoError(t, err)

	defer lis.Close()

	c, err := lis.Accept()
	require.NoError(t, err)

	defer c.Close()

	s, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "record 1", decode(t, s).Msg)

	require.Eventually(t, func() bool { return logs.FilterMessage("shipping the kernel log again").Len() == 1 }, 10*time.Second, time.Millisecond)

	// Ending while a record waits on the destination is prompt.
	require.NoError(t, lis.Close())
	c.Close()

	r.feed(t, 2) // it waits: the receiver is gone, and nothing listens
	time.Sleep(50 * time.Millisecond)
	cancel()

	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}

// TestRefusedThenAccepted: a receiver that accepts the connection and closes it at once
// (Omni, before the machine is accepted) is an outage, said once — not a reconnection
// every second, each a line in the kernel log it ships.
func TestRefusedThenAccepted(t *testing.T) {
	t.Parallel()

	lis, refuse, accepted := refusingReceiver(t)

	core, logs := observer.New(zapcore.DebugLevel)
	r := newFakeReader()
	cancel, done := runShipper(t, "tcp://"+lis.Addr().String(), r, zap.New(core))

	r.feed(t, 1)

	require.Eventually(t, func() bool {
		return logs.FilterMessage("the kernel log's destination is unreachable; retrying").Len() == 1
	}, 10*time.Second, time.Millisecond)

	time.Sleep(300 * time.Millisecond) // several refused connections

	assert.Equal(t, 1, logs.FilterMessage("the kernel log's destination is unreachable; retrying").Len(), "one line per outage")
	assert.Zero(t, logs.FilterMessage("shipping the kernel log again").Len(), "a refused connection is not shipping")

	refuse.Store(false)

	c := <-accepted
	defer c.Close()

	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "record 1", decode(t, line).Msg, "the record waited for the receiver")

	cancel()
	require.NoError(t, <-done)
}

// TestLostTellsOwner: a shipping connection the receiver drops while the machine is
// quiet (Omni restarting) is noticed at once, without a record to send, and OnLost told;
// a refused connection and the shipper's own end are not losses.
func TestLostTellsOwner(t *testing.T) {
	t.Parallel()

	lis, refuse, accepted := refusingReceiver(t)

	lost := make(chan error, 16)
	r := newFakeReader()
	cancel, done := runShipper(t, "tcp://"+lis.Addr().String(), r, zap.NewNop(), func(err error) { lost <- err })

	r.feed(t, 1)
	time.Sleep(300 * time.Millisecond) // refused connections
	assert.Empty(t, lost, "a refused connection is no loss")

	refuse.Store(false)

	first := <-accepted
	_, err := bufio.NewReader(first).ReadString('\n')
	require.NoError(t, err)

	first.Close()

	select {
	case err := <-lost:
		assert.ErrorIs(t, err, io.EOF, "the receiver closed the connection")
	case <-time.After(10 * time.Second):
		t.Fatal("OnLost was not told of the dropped connection")
	}

	// The next record goes on a new connection.
	r.feed(t, 2)

	second := <-accepted
	defer second.Close()

	line, err := bufio.NewReader(second).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "record 2", decode(t, line).Msg)

	cancel()
	require.NoError(t, <-done)
	assert.Empty(t, lost, "the shipper's own end is no loss")
}

// TestUDP: one record per datagram, without the newline.
func TestUDP(t *testing.T) {
	t.Parallel()

	pc, err := (&net.ListenConfig{}).ListenPacket(t.Context(), "udp", "127.0.0.1:0")
	require.NoError(t, err)

	defer pc.Close()

	r := newFakeReader()
	cancel, done := runShipper(t, "udp://"+pc.LocalAddr().String(), r, zap.NewNop())

	r.feed(t, 7)

	buf := make([]byte, 64<<10)
	require.NoError(t, pc.SetReadDeadline(time.Now().Add(10*time.Second)))

	n, _, err := pc.ReadFrom(buf)
	require.NoError(t, err)
	assert.NotContains(t, string(buf[:n]), "\n")
	assert.Equal(t, "record 7", decode(t, string(buf[:n])).Msg)

	cancel()
	require.NoError(t, <-done)
}

// TestBadRecordsAndTheEnd: a record go-kmsg could not parse is skipped; a log that ends
// is an error.
func TestBadRecordsAndTheEnd(t *testing.T) {
	t.Parallel()

	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)

	defer lis.Close()

	r := newFakeReader()
	_, done := runShipper(t, "tcp://"+lis.Addr().String(), r, zap.NewNop())

	r.ch <- kmsg.Packet{Err: errors.New("message metdata should have at least 3 parts")}

	r.feed(t, 1)

	c, err := lis.Accept()
	require.NoError(t, err)

	defer c.Close()

	s, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "record 1", decode(t, s).Msg)

	close(r.ch)
	assert.ErrorContains(t, <-done, "the kernel log ended")
}

func TestOptions(t *testing.T) {
	t.Parallel()

	for _, u := range []*url.URL{nil, {Scheme: "http", Host: "h:1"}, {Scheme: "tcp"}} {
		assert.Error(t, Run(t.Context(), Options{URL: u, Reader: newFakeReader()}))
	}
}

// TestRealKernelLog ships this machine's own kernel log, from its first record, where
// the test may read /dev/kmsg; and ends promptly with its context, though the reader
// waits on the kernel for the next record.
func TestRealKernelLog(t *testing.T) {
	t.Parallel()

	if r, err := kmsg.NewReader(); err != nil {
		t.Skipf("cannot read the kernel log here: %v", err)
	} else {
		r.Close()
	}

	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)

	defer lis.Close()

	dest, err := url.Parse("tcp://" + lis.Addr().String())
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() { done <- Run(ctx, Options{URL: dest}) }()

	c, err := lis.Accept()
	require.NoError(t, err)

	defer c.Close()

	in := bufio.NewReader(c)

	s, err := in.ReadString('\n')
	require.NoError(t, err)

	first := decode(t, s)
	assert.NotEmpty(t, first.Msg)
	assert.NotEmpty(t, first.Facility)

	// Read on until the shipper has caught up and waits on the kernel.
	for {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(500*time.Millisecond)))

		if _, err := in.ReadString('\n'); err != nil {
			break
		}
	}

	cancel()

	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}

// refusingReceiver listens on loopback and closes every connection at once while refuse
// holds (it does at first), then hands the connections it accepts to accepted.
func refusingReceiver(t *testing.T) (lis net.Listener, refuse *atomic.Bool, accepted chan net.Conn) {
	t.Helper()

	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)

	t.Cleanup(func() { lis.Close() })

	refuse = &atomic.Bool{}
	refuse.Store(true)

	accepted = make(chan net.Conn, 16)

	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}

			if refuse.Load() {
				c.Close()

				continue
			}

			accepted <- c
		}
	}()

	return lis, refuse, accepted
}
