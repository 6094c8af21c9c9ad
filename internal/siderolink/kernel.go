package siderolink

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// kernelTunnel is a kernel WireGuard link, configured through wgctrl (generic netlink),
// as Talos configures its own.
type kernelTunnel struct {
	name string
	rt   *rtnetlink.Conn
	wg   *wgctrl.Client
}

// openKernel creates the WireGuard link name; one left by an earlier run is taken over.
// It fails where the kernel has no WireGuard (EOPNOTSUPP: no module).
func openKernel(name string) (*kernelTunnel, error) {
	rt, err := rtnetlink.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("error opening rtnetlink: %w", err)
	}

	err = rt.Link.New(&rtnetlink.LinkMessage{
		Family: unix.AF_UNSPEC,
		Type:   unix.ARPHRD_NONE,
		Attributes: &rtnetlink.LinkAttributes{
			Name: name,
			MTU:  MTU,
			Info: &rtnetlink.LinkInfo{Kind: "wireguard"},
		},
	})
	if err != nil && !errors.Is(err, fs.ErrExist) {
		rt.Close()

		return nil, fmt.Errorf("error creating the WireGuard link %s: %w", name, err)
	}

	wg, err := wgctrl.New()
	if err != nil {
		t := &kernelTunnel{name: name, rt: rt}
		t.Close()

		return nil, fmt.Errorf("error opening the WireGuard control: %w", err)
	}

	return &kernelTunnel{name: name, rt: rt, wg: wg}, nil
}

func (t *kernelTunnel) Configure(cfg tunnelConfig) error {
	keepalive := Keepalive
	allowed := make([]net.IPNet, 0, len(cfg.AllowedIPs))

	for _, p := range cfg.AllowedIPs {
		allowed = append(allowed, net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())})
	}

	err := t.wg.ConfigureDevice(t.name, wgtypes.Config{
		PrivateKey:   &cfg.PrivateKey,
		ReplacePeers: true,
		Peers: []wgtypes.PeerConfig{{
			PublicKey:                   cfg.PeerKey,
			Endpoint:                    net.UDPAddrFromAddrPort(cfg.Endpoint),
			PersistentKeepaliveInterval: &keepalive,
			ReplaceAllowedIPs:           true,
			AllowedIPs:                  allowed,
		}},
	})
	if err != nil {
		// wgctrl's errors name the device, never the key.
		return fmt.Errorf("error configuring WireGuard on %s: %w", t.name, err)
	}

	index, err := linkIndex(t.rt, t.name)
	if err != nil {
		return err
	}

	// The MTU again: a link taken over from an earlier run may have another.
	if err := t.rt.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: index, Attributes: &rtnetlink.LinkAttributes{MTU: MTU}}); err != nil {
		return fmt.Errorf("error setting the MTU of %s: %w", t.name, err)
	}

	if err := setUp(t.rt, index); err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}

	if err := setAddress(t.rt, index, cfg.Address); err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}

	return nil
}

func (t *kernelTunnel) LastHandshake(peer wgtypes.Key) (time.Time, error) {
	dev, err := t.wg.Device(t.name)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, fmt.Errorf("no WireGuard link %s: %w", t.name, errPeerGone)
	}

	if err != nil {
		return time.Time{}, fmt.Errorf("error reading WireGuard link %s: %w", t.name, err)
	}

	for _, p := range dev.Peers {
		if p.PublicKey == peer {
			return p.LastHandshakeTime, nil
		}
	}

	return time.Time{}, errPeerGone
}

// Close deletes the link; the kernel removes its address and routes with it.
func (t *kernelTunnel) Close() error {
	var errs []error

	if index, err := linkIndex(t.rt, t.name); err == nil {
		if err := t.rt.Link.Delete(index); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("error deleting the link %s: %w", t.name, err))
		}
	}

	if t.wg != nil {
		errs = append(errs, t.wg.Close())
	}

	errs = append(errs, t.rt.Close())

	return errors.Join(errs...)
}
