// Package kmsglog ships the kernel log to where talos.logging.kernel points, as Talos'
// KmsgLogDeliveryController does: every record of /dev/kmsg from the first, as one JSON
// object (newline-delimited over TCP, one per datagram over UDP). Omni's log receiver
// reads that stream per connection and files it under the machine the source address
// belongs to, so over SideroLink the agent's kernel log — its own log included, which it
// writes through /dev/kmsg — shows in Omni as a Talos machine's does.
//
// Shipping never holds the agent up: the kernel keeps its log in a ring that writers never
// wait on. While the destination is unreachable the shipper stops reading, and records
// the ring overwrites meanwhile are lost, as they are to Talos.
//
// Unlike Talos, it ships no secret: the kernel logs its command line (the agent's
// per-boot token, Omni's join token) and the agent's own lines may quote one, so every
// record has its secrets redacted before it leaves the machine (bootparams.Redact, and
// bootparams.RedactValues for a secret the agent knows, cut by a record boundary).
package kmsglog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/siderolabs/go-kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/anvil-metal/anvil/internal/bootparams"
)

// Defaults of Options.
const (
	// DefaultSendTimeout bounds one record's write: Talos' logSendTimeout. A connection
	// that takes longer is dead (Omni gone without a reset) and is dialled anew.
	DefaultSendTimeout = 5 * time.Second
	// DefaultBackoff and DefaultMaxBackoff space the attempts while the destination is
	// unreachable (before SideroLink is up, or while Omni restarts). Talos retries every
	// second; the doubling to 10 s spares a link that stays down.
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = 10 * time.Second
)

// keepAlive probes an idle connection, so that a receiver gone without a word (Omni's
// process ended: its end of SideroLink went with it) is noticed within a minute, not at
// the next record.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}

// Options configure Run.
type Options struct {
	// URL is the destination, tcp://host:port or udp://host:port (config.Omni.KernelLog).
	URL *url.URL
	// Reader is the kernel log; nil opens /dev/kmsg from its first record, following it.
	Reader kmsg.Reader
	// Dial connects to the destination; nil means a net.Dialer with TCP keepalive.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Secrets are values no record may show, whole or cut by a record boundary (see
	// bootparams.RedactValues): the agent's own, as bootparams.Secrets finds them on
	// its command line. Named secrets (bootparams.Redact) are hidden without them.
	Secrets []string
	// OnLost is told when a TCP connection that was shipping ends from the receiver's
	// side — closed, reset, or silent past TCP keepalive: Omni restarted, or the path to
	// it broke. It runs on a goroutine of Run's and must return quickly. nil: nobody.
	OnLost func(error)
	Logger *zap.Logger
	// 0 means the default of the same name.
	SendTimeout         time.Duration
	Backoff, MaxBackoff time.Duration
}

// Run ships the kernel log until ctx ends, then returns nil; an error only when there is
// no kernel log to read, or it ends.
func Run(ctx context.Context, opts Options) error {
	if opts.URL == nil || (opts.URL.Scheme != "tcp" && opts.URL.Scheme != "udp") || opts.URL.Host == "" {
		return errors.New("the kernel log's destination is no tcp:// or udp:// URL")
	}

	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&opts.SendTimeout, DefaultSendTimeout}, {&opts.Backoff, DefaultBackoff}, {&opts.MaxBackoff, DefaultMaxBackoff}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}

	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}

	if opts.Dial == nil {
		opts.Dial = (&net.Dialer{KeepAliveConfig: keepAlive}).DialContext
	}

	if opts.OnLost == nil {
		opts.OnLost = func(error) {}
	}

	if opts.Reader == nil {
		r, err := kmsg.NewReader(kmsg.Follow())
		if err != nil {
			return fmt.Errorf("error opening the kernel log: %w", err)
		}

		opts.Reader = r
	}

	defer opts.Reader.Close()

	s := &sender{opts: opts, log: opts.Logger, backoff: opts.Backoff}
	defer s.close()

	// Scan's goroutine ends when ctx does, or with the log; it is drained either way.
	packets := opts.Reader.Scan(ctx)

	for {
		var p kmsg.Packet

		select {
		case <-ctx.Done():
			return nil
		case pkt, ok := <-packets:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}

				return errors.New("the kernel log ended")
			}

			p = pkt
		}

		if p.Err != nil {
			// A record go-kmsg cannot parse, or a failed read (then the channel closes).
			s.log.Debug("error reading a kernel log record", zap.Error(p.Err))

			continue
		}

		// The kernel's own records quote its command line: nothing secret leaves.
		p.Message.Message = bootparams.RedactValues(bootparams.Redact(p.Message.Message), opts.Secrets)

		line, err := encode(p.Message)
		if err != nil {
			continue
		}

		if !s.send(ctx, line) {
			return nil
		}
	}
}

// sender holds the connection to the destination and says, once per outage, that it is
// lost and found again: its own lines go into the kernel log it ships, so it must not
// write one per attempt.
type sender struct {
	opts    Options
	log     *zap.Logger
	conn    net.Conn
	backoff time.Duration
	down    bool // an outage was logged

	// closing is closed when the sender itself closes conn, before it does: the watcher
	// of conn (watch) then knows the end is not the receiver's.
	closing  chan struct{}
	watching sync.WaitGroup
}

// send writes line, retrying until it goes or ctx ends (false then). A record that went
// out in part is dropped rather than sent again: the receiver would read it twice.
func (s *sender) send(ctx context.Context, line []byte) bool {
	if s.opts.URL.Scheme == "tcp" {
		line = append(line, '\n')
	}

	for {
		err := s.write(ctx, line)
		if err == nil {
			return true
		}

		if errors.Is(err, errPartial) {
			return true
		}

		if !s.down {
			s.down = true
			s.log.Warn("the kernel log's destination is unreachable; retrying", zap.Stringer("url", s.opts.URL), zap.Error(err))
		}

		wait := s.backoff
		s.backoff = min(2*s.backoff, s.opts.MaxBackoff)

		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

var errPartial = errors.New("record sent in part")

func (s *sender) write(ctx context.Context, line []byte) error {
	if s.conn == nil {
		dctx, cancel := context.WithTimeout(ctx, s.opts.SendTimeout)
		conn, err := s.opts.Dial(dctx, s.opts.URL.Scheme, s.opts.URL.Host)

		cancel()

		if err != nil {
			return fmt.Errorf("error connecting: %w", err)
		}

		// Connected is not yet shipping: a receiver that refuses this machine (Omni,
		// before it is accepted) closes the connection at once. It never writes back, so
		// a read that does not time out is that close.
		if s.opts.URL.Scheme == "tcp" && refused(conn) {
			conn.Close()

			return errors.New("the receiver closed the connection at once: it refuses this machine (for now)")
		}

		s.conn = conn

		if s.opts.URL.Scheme == "tcp" {
			s.watch(conn)
		}
	}

	_ = s.conn.SetWriteDeadline(time.Now().Add(s.opts.SendTimeout))

	n, err := s.conn.Write(line)
	if err == nil {
		s.backoff = s.opts.Backoff

		if s.down {
			s.down = false
			s.log.Info("shipping the kernel log again", zap.Stringer("url", s.opts.URL))
		}

		return nil
	}

	s.close()

	if n > 0 {
		s.log.Debug("dropped a kernel log record sent in part", zap.Error(err))

		return errPartial
	}

	return fmt.Errorf("error sending: %w", err)
}

func (s *sender) close() {
	if s.closing != nil {
		close(s.closing)
		s.closing = nil
	}

	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}

	s.watching.Wait()
}

// watch reads conn until it ends: the receiver never writes, so a read returns only when
// the connection does. Ended by the receiver, conn is closed (the next record dials anew)
// and OnLost told.
func (s *sender) watch(conn net.Conn) {
	closing := make(chan struct{})
	s.closing = closing

	s.watching.Go(func() {
		_, err := io.Copy(io.Discard, conn)

		select {
		case <-closing:
			return
		default:
		}

		if err == nil {
			err = io.EOF
		}

		conn.Close()
		s.log.Info("the kernel log's receiver dropped the connection", zap.Stringer("url", s.opts.URL), zap.Error(err))
		s.opts.OnLost(err)
	})
}

// record is one kernel log record as Talos sends it (runtime.LogEvent through
// logging.NewJSONLines): its fields in the order json.Marshal gives Talos' map, so the
// lines are Talos' byte for byte.
type record struct {
	Clock      int64  `json:"clock"`
	Facility   string `json:"facility"`
	Msg        string `json:"msg"`
	Priority   string `json:"priority"`
	Seq        int64  `json:"seq"`
	TalosLevel string `json:"talos-level"`
	TalosTime  string `json:"talos-time"`
}

// encode renders a kernel log record as Talos does: its message, time, sequence number,
// clock (µs since boot), facility and priority by name, and the zap level Talos maps the
// priority to.
func encode(m kmsg.Message) ([]byte, error) {
	b, err := json.Marshal(record{
		Clock:      m.Clock,
		Facility:   facility(m.Facility),
		Msg:        m.Message,
		Priority:   priority(m.Priority),
		Seq:        m.SequenceNumber,
		TalosLevel: level(m.Priority).String(),
		TalosTime:  m.Timestamp.Format(time.RFC3339Nano),
	})
	if err != nil {
		return nil, fmt.Errorf("error encoding a kernel log record: %w", err)
	}

	return b, nil
}

// The names of syslog facilities and priorities, as kmsg.Facility and kmsg.Priority
// print them. Their String methods index arrays: a facility beyond local7, which a
// process writing "<1000>..." to /dev/kmsg can make, would panic there.
var (
	facilities = []string{
		"kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
		"local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
	}
	priorities = []string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}
)

func facility(f kmsg.Facility) string {
	if f >= 0 && int(f) < len(facilities) {
		return facilities[f]
	}

	return strconv.Itoa(int(f))
}

func priority(p kmsg.Priority) string {
	if p >= 0 && int(p) < len(priorities) {
		return priorities[p]
	}

	return strconv.Itoa(int(p))
}

// level is Talos' kmsgPriorityToLevel.
func level(p kmsg.Priority) zapcore.Level {
	switch p {
	case kmsg.Debug:
		return zapcore.DebugLevel
	case kmsg.Info, kmsg.Notice:
		return zapcore.InfoLevel
	case kmsg.Warning:
		return zapcore.WarnLevel
	default:
		return zapcore.ErrorLevel
	}
}

// acceptProbe is how long a new connection is watched for the receiver closing it.
const acceptProbe = 200 * time.Millisecond

// refused says whether the receiver closed a new connection at once.
func refused(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now().Add(acceptProbe))

	var b [1]byte

	_, err := conn.Read(b[:])

	var ne net.Error

	_ = conn.SetReadDeadline(time.Time{})

	return !errors.As(err, &ne) || !ne.Timeout()
}
