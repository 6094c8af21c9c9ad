package siderolink

import (
	"bufio"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// userspaceTunnel is wireguard-go over a tun.Device: a real TUN link where the kernel
// has no WireGuard, or (in tests) a netstack.
type userspaceTunnel struct {
	dev *device.Device
	// setAddress gives the device's link the node's address.
	setAddress func(netip.Prefix) error
	// release frees what the device does not own; nil when nothing.
	release func() error
}

// newUserspace starts wireguard-go over t, sending through the default UDP bind (a
// random port, as Talos' link has).
func newUserspace(t tun.Device, logger *zap.Logger, setAddress func(netip.Prefix) error, release func() error) *userspaceTunnel {
	return &userspaceTunnel{
		dev:        device.NewDevice(t, conn.NewDefaultBind(), deviceLogger(logger)),
		setAddress: setAddress,
		release:    release,
	}
}

// deviceLogger logs wireguard-go's lines at debug level, its errors at warning level.
func deviceLogger(logger *zap.Logger) *device.Logger {
	s := logger.Sugar()

	return &device.Logger{Verbosef: s.Debugf, Errorf: s.Warnf}
}

// openUserspace creates the TUN link name and runs wireguard-go over it.
func openUserspace(name string, logger *zap.Logger) (*userspaceTunnel, error) {
	t, err := tun.CreateTUN(name, MTU)
	if err != nil {
		return nil, fmt.Errorf("error creating the TUN link %s: %w", name, err)
	}

	rt, err := rtnetlink.Dial(nil)
	if err != nil {
		t.Close()

		return nil, fmt.Errorf("error opening rtnetlink: %w", err)
	}

	setAddress := func(p netip.Prefix) error {
		index, err := linkIndex(rt, name)
		if err != nil {
			return err
		}

		if err := setUp(rt, index); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}

		if err := setAddress(rt, index, p); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}

		return nil
	}

	return newUserspace(t, logger, setAddress, rt.Close), nil
}

func (u *userspaceTunnel) Configure(cfg tunnelConfig) error {
	// IpcSet's errors name the setting that failed, never the configuration's text.
	if err := u.dev.IpcSet(uapiConfig(cfg)); err != nil {
		return fmt.Errorf("error configuring wireguard-go: %w", err)
	}

	if err := u.dev.Up(); err != nil {
		return fmt.Errorf("error starting wireguard-go: %w", err)
	}

	return u.setAddress(cfg.Address)
}

// LastHandshake reads the peer's last handshake from the device's configuration dump
// (wireguard-go keeps it unexported), which also holds the private key: it is parsed
// here and goes nowhere else.
func (u *userspaceTunnel) LastHandshake(peer wgtypes.Key) (time.Time, error) {
	dump, err := u.dev.IpcGet()
	if err != nil {
		return time.Time{}, fmt.Errorf("error reading wireguard-go's state: %w", err)
	}

	return lastHandshake(dump, peer)
}

// lastHandshake finds peer's last handshake in a configuration dump.
func lastHandshake(dump string, peer wgtypes.Key) (time.Time, error) {
	want := fmt.Sprintf("%x", peer[:])

	var (
		inPeer, found bool
		sec, nsec     int64
	)

	sc := bufio.NewScanner(strings.NewReader(dump))
	for sc.Scan() {
		key, value, _ := strings.Cut(sc.Text(), "=")

		switch key {
		case "public_key":
			inPeer = value == want
			found = found || inPeer
		case "last_handshake_time_sec", "last_handshake_time_nsec":
			if !inPeer {
				continue
			}

			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("error reading wireguard-go's state: %s is %q", key, value)
			}

			if key == "last_handshake_time_sec" {
				sec = n
			} else {
				nsec = n
			}
		}
	}

	if !found {
		return time.Time{}, errPeerGone
	}

	if sec == 0 && nsec == 0 {
		return time.Time{}, nil
	}

	return time.Unix(sec, nsec), nil
}

// Close stops wireguard-go, which closes the TUN device: the kernel removes the link.
func (u *userspaceTunnel) Close() error {
	u.dev.Close()

	if u.release != nil {
		return u.release()
	}

	return nil
}
