// Package siderolink joins the machine to Omni's SideroLink as Talos does: it asks Omni's
// Provision API for a place on the WireGuard network Omni runs (a node address, Omni's key
// and endpoint), brings up the link — kernel WireGuard where the kernel has it, wireguard-go
// over a TUN device where not — and keeps it: when the handshakes stop, it provisions again
// and reconfigures, as Talos' siderolink.ManagerController does. Omni then reaches the
// machine's maintenance API at the node address, port 50000.
package siderolink

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// Defaults of Options' timings.
const (
	// DefaultStaleAfter is how long after the last handshake the link counts as down:
	// siderolink's wireguard.PeerDownInterval, the WireGuard paper's handshake timeout
	// (180 s) + rekey timeout (5 s) + rekey attempt time (90 s). Talos re-provisions
	// at it, and Omni's own check marks the machine disconnected at it. A live link
	// stays below it: the keepalive every 25 s is traffic, traffic needs a session key,
	// and a key lives 180 s at most (REJECT_AFTER_TIME; the initiator replaces it after
	// 120 s), so a live link handshakes at least every 180 s + 25 s, with a minute of
	// failed attempts to spare.
	DefaultStaleAfter = 275 * time.Second
	// DefaultFirstHandshakeWithin is how long a new configuration may go without any
	// handshake: WireGuard's REKEY_ATTEMPT_TIME, after which WireGuard itself gives up
	// a handshake attempt. A link that never came up (a stale endpoint, a peer Omni does
	// not know) moves on well before Omni's 275 s, but not before WireGuard's retries
	// (every 5 s) had their chance.
	DefaultFirstHandshakeWithin = 90 * time.Second
	// DefaultCheckEvery is how often the handshake is read: Talos' period, and that of
	// Omni's own check (pollWireguardPeers).
	DefaultCheckEvery = 30 * time.Second
	// DefaultBackoff and DefaultMaxBackoff space the attempts after a failed Provision
	// or configuration: doubling from 1 s to a minute.
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = time.Minute
)

// Options configure Run.
type Options struct {
	// API is Omni's Provision API, host:port (config.SideroLinkAPI.Host).
	API string
	// Insecure dials API in plaintext (siderolink.api=grpc://), else over TLS (https://),
	// as Talos does.
	Insecure bool
	// RootCAs verify API's certificate over TLS; nil means the system's roots.
	RootCAs *x509.CertPool
	// JoinToken goes to Provision as it is. It is never logged.
	JoinToken string
	// UUID is the machine's SMBIOS UUID, the node's name in Omni.
	UUID string
	// UniqueToken is the node unique token to present, as Talos keeps it in META (key
	// 0x10); "" makes one from MACs with a random part, kept for the life of Run. It is
	// never logged.
	UniqueToken string
	// MACs are the machine's physical NICs' addresses (LinkMACs), for the node unique
	// token's fingerprint; read once, before the first Provision.
	MACs func() []net.HardwareAddr
	// TalosVersion is the version Provision is told (talosversion.Tag).
	TalosVersion string
	// LinkName names the link; "" means DefaultLinkName.
	LinkName string
	// Userspace skips kernel WireGuard: wireguard-go over a TUN device only.
	Userspace bool
	// OnAddress is told the node's SideroLink address once the link carries it, again
	// whenever a re-provision moves it, and the zero Addr when Run removes the link on
	// its way out. It runs on Run's goroutine: it must return quickly.
	OnAddress func(netip.Addr)
	// Reprovision, when it delivers, makes Run provision again at once, as for a stale
	// link: its owner sends when it learns that Omni's end of the link went away (Omni
	// restarted), which the handshakes would tell only after StaleAfter, if at all — a
	// restarted Omni with its state takes the old peer back. A send from before the link
	// was last configured counts for nothing. nil: never.
	Reprovision <-chan struct{}
	Logger      *zap.Logger

	// Timings; 0 means the default of the same name.
	StaleAfter           time.Duration
	FirstHandshakeWithin time.Duration
	CheckEvery           time.Duration
	Backoff, MaxBackoff  time.Duration

	// open and clock replace the link and the time in tests.
	open  opener
	clock clock
}

// Run joins SideroLink and keeps the link until ctx ends, then removes it and returns
// nil. Failures along the way (Omni unreachable or refusing, a link that cannot be
// made) are logged and retried with backoff; Run returns an error only for Options it
// cannot work with.
func Run(ctx context.Context, opts Options) error {
	if err := opts.setDefaults(); err != nil {
		return err
	}

	r := &runner{opts: opts, log: opts.Logger, uniqueToken: opts.UniqueToken}

	r.run(ctx)

	return nil
}

func (o *Options) setDefaults() error {
	var errs []error

	for _, f := range []struct{ value, name string }{
		{o.API, "the Provision API"}, {o.JoinToken, "a join token"}, {o.UUID, "the machine's UUID"}, {o.TalosVersion, "a Talos version"},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("SideroLink needs %s", f.name))
		}
	}

	if o.UniqueToken == "" && o.MACs == nil {
		errs = append(errs, errors.New("SideroLink needs a node unique token or the MACs to make one"))
	}

	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&o.StaleAfter, DefaultStaleAfter}, {&o.FirstHandshakeWithin, DefaultFirstHandshakeWithin}, {&o.CheckEvery, DefaultCheckEvery},
		{&o.Backoff, DefaultBackoff}, {&o.MaxBackoff, DefaultMaxBackoff},
	} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}

	if o.LinkName == "" {
		o.LinkName = DefaultLinkName
	}

	if o.OnAddress == nil {
		o.OnAddress = func(netip.Addr) {}
	}

	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}

	if o.open == nil {
		o.open = openLink(o.LinkName, o.Userspace)
	}

	if o.clock == nil {
		o.clock = realClock{}
	}

	return nil
}

// runner is one Run: the node's unique token, which every Provision presents.
type runner struct {
	opts        Options
	uniqueToken string
	log         *zap.Logger
}

// run provisions, configures the link and watches it, over again, until ctx ends.
func (r *runner) run(ctx context.Context) {
	var (
		t       tunnel
		current provisioned
		pending []string // current's endpoints not tried yet
		addr    netip.Addr
		backoff = r.opts.Backoff
	)

	defer func() {
		if t != nil {
			if err := t.Close(); err != nil {
				r.log.Warn("error removing the SideroLink link", zap.Error(err))
			}
		}

		if addr.IsValid() {
			r.opts.OnAddress(netip.Addr{})
		}
	}()

	// retry logs err and waits out the backoff; false when ctx ended meanwhile.
	retry := func(msg string, err error) bool {
		r.log.Warn(msg, zap.Error(err), zap.Duration("retry_in", backoff))

		wait := backoff
		backoff = min(2*backoff, r.opts.MaxBackoff)

		return r.sleep(ctx, wait)
	}

	for ctx.Err() == nil {
		if len(pending) == 0 {
			p, err := r.provisionOnce(ctx)
			if err != nil {
				if !retry("error joining SideroLink", err) {
					return
				}

				continue
			}

			current, pending = p, p.endpoints

			r.log.Info("provisioned on SideroLink", zap.Stringer("node_address", p.nodePrefix), zap.Stringer("server_address", p.serverAddress),
				zap.Strings("endpoints", p.endpoints))
		}

		endpoint := pending[0]
		pending = pending[1:]

		ep, err := resolve(ctx, endpoint)
		if err != nil {
			if !retry("error resolving the SideroLink endpoint", err) {
				return
			}

			continue
		}

		cfg := tunnelConfig{
			PrivateKey: current.nodeKey,
			PeerKey:    current.serverKey,
			Endpoint:   ep,
			AllowedIPs: []netip.Prefix{netip.PrefixFrom(current.serverAddress, current.serverAddress.BitLen())},
			Address:    current.nodePrefix,
		}

		if t, err = r.apply(ctx, t, cfg); err != nil {
			if !retry("error configuring the SideroLink link", err) {
				return
			}

			continue
		}

		backoff = r.opts.Backoff
		configured := r.opts.clock.Now()

		r.log.Info("SideroLink link configured", zap.Stringer("endpoint", ep), zap.Stringer("node_address", cfg.Address))

		// What was said of the configuration this one replaces is no news.
		select {
		case <-r.opts.Reprovision:
		default:
		}

		if a := cfg.Address.Addr(); a != addr {
			addr = a
			r.opts.OnAddress(addr)
		}

		err = r.watch(ctx, t, cfg.PeerKey, configured)
		if ctx.Err() != nil {
			return
		}

		again := len(pending) == 0 || errors.Is(err, errPeerGone) || errors.Is(err, errOmniGone)
		r.log.Warn("SideroLink is down; reconnecting", zap.Error(err), zap.Bool("provision_again", again))

		if again {
			pending = nil
		}
	}
}

// provisionOnce calls Provision, making the unique token first if there is none yet.
func (r *runner) provisionOnce(ctx context.Context) (provisioned, error) {
	if r.uniqueToken == "" {
		token, err := NewUniqueToken(r.opts.MACs())
		if err != nil {
			return provisioned{}, err
		}

		r.uniqueToken = token
	}

	return r.provision(ctx)
}

// apply configures t with cfg, or — when there is none, or it fails — opens another.
func (r *runner) apply(ctx context.Context, t tunnel, cfg tunnelConfig) (tunnel, error) {
	if t != nil {
		err := t.Configure(cfg)
		if err == nil {
			return t, nil
		}

		r.log.Warn("error reconfiguring the SideroLink link; making it anew", zap.Error(err))

		if err := t.Close(); err != nil {
			r.log.Warn("error removing the SideroLink link", zap.Error(err))
		}
	}

	return r.opts.open(ctx, r.log, cfg)
}

// resolve turns an endpoint, host:port, into an address: Omni may advertise a name, and
// its address may move between re-provisions, so it is looked up each time, as Talos
// does.
func resolve(ctx context.Context, endpoint string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}

	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("endpoint %q: the port is no number", endpoint)
	}

	if a, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(a.Unmap(), uint16(p)), nil
	}

	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("error resolving endpoint %q: %w", endpoint, err)
	}

	if len(addrs) == 0 {
		return netip.AddrPort{}, fmt.Errorf("endpoint %q resolves to no address", endpoint)
	}

	return netip.AddrPortFrom(addrs[0].Unmap(), uint16(p)), nil
}
