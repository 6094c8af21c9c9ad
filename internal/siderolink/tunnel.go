package siderolink

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Link parameters, as Talos sets them for its SideroLink link.
const (
	// DefaultLinkName is the link's name in Talos (constants.SideroLinkName); Omni's
	// server side names its own link the same, each in its own machine.
	DefaultLinkName = "siderolink"
	// MTU is siderolink's wireguard.LinkMTU: IPv6's minimum, so that a WireGuard packet
	// with its overhead fits whatever path lies between machine and Omni.
	MTU = 1280
	// Keepalive is Talos' constants.SideroLinkDefaultPeerKeepalive. Omni does not know
	// the machine's endpoint until the machine speaks first, and a NAT on the way forgets
	// an idle mapping: the machine keeps the tunnel alive.
	Keepalive = 25 * time.Second
)

// errPeerGone says the link no longer has Omni's peer (or is gone itself): someone
// removed it, and only a new configuration brings it back.
var errPeerGone = errors.New("the SideroLink peer is gone")

// tunnelConfig is one configuration of the link, from one Provision response.
type tunnelConfig struct {
	// PrivateKey is the node's WireGuard key. It is never logged.
	PrivateKey wgtypes.Key
	// PeerKey is Omni's public key.
	PeerKey wgtypes.Key
	// Endpoint is Omni's WireGuard endpoint, resolved.
	Endpoint netip.AddrPort
	// AllowedIPs are Omni's addresses on the link: its server address alone, as Talos
	// has it; the node's prefix route sends that address onto the link.
	AllowedIPs []netip.Prefix
	// Address is the node's address and prefix on the link.
	Address netip.Prefix
}

// tunnel is the SideroLink WireGuard link, kernel or userspace.
type tunnel interface {
	// Configure replaces the link's key, peer and address with cfg's and brings it up.
	// After an error the caller closes the tunnel and opens another.
	Configure(cfg tunnelConfig) error
	// LastHandshake is the time of the last handshake with peer, zero when none has
	// been; errPeerGone when the link has no such peer.
	LastHandshake(peer wgtypes.Key) (time.Time, error)
	// Close removes the link.
	Close() error
}

// opener opens the tunnel, configured with cfg.
type opener func(ctx context.Context, logger *zap.Logger, cfg tunnelConfig) (tunnel, error)

// openLink opens the link called name: kernel WireGuard where the kernel has it (Talos'
// way), else wireguard-go over a TUN device of the same name. userspace skips the
// kernel's.
func openLink(name string, userspace bool) opener {
	return func(ctx context.Context, logger *zap.Logger, cfg tunnelConfig) (tunnel, error) {
		if !userspace {
			t, err := openKernel(name)
			if err == nil {
				if err = t.Configure(cfg); err == nil {
					logger.Info("SideroLink over kernel WireGuard", zap.String("link", name))

					return t, nil
				}

				t.Close()
			}

			logger.Info("no kernel WireGuard; SideroLink over wireguard-go", zap.String("link", name), zap.Error(err))
		}

		t, err := openUserspace(name, logger)
		if err != nil {
			return nil, err
		}

		if err := t.Configure(cfg); err != nil {
			t.Close()

			return nil, err
		}

		return t, nil
	}
}

// uapiConfig renders cfg in WireGuard's cross-platform configuration protocol (what
// wireguard-go's IpcSet reads): the whole device, its one peer replacing any other.
// It holds the private key: it goes to the device and nowhere else.
func uapiConfig(cfg tunnelConfig) string {
	s := fmt.Sprintf("private_key=%x\nreplace_peers=true\npublic_key=%x\nendpoint=%s\npersistent_keepalive_interval=%d\nreplace_allowed_ips=true\n",
		cfg.PrivateKey[:], cfg.PeerKey[:], cfg.Endpoint, int(Keepalive/time.Second))

	for _, p := range cfg.AllowedIPs {
		s += "allowed_ip=" + p.String() + "\n"
	}

	return s
}
