// Package bmc reads and provisions the machine's BMC through the local IPMI interface
// (/dev/ipmi0): its LAN address, and a user the provider logs in with.
package bmc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/app"
	"github.com/bougou/go-ipmi/pkg/types"
)

// DevicePath is the local IPMI device go-ipmi's open client uses (device number 0).
const DevicePath = "/dev/ipmi0"

// DefaultPort is the RMCP/RMCP+ port when the BMC does not report another one.
const DefaultPort = 623

// Limits of IPMI 2.0: 16-byte user names, passwords of 16 bytes or, stored as 20, of 20.
const (
	maxUserLen     = 16
	maxPassword16  = 16
	maxPasswordLen = 20
)

// ErrNoDevice is returned when the machine has no local IPMI interface.
var ErrNoDevice = errors.New("no local BMC interface: " + DevicePath + " missing (ipmi_si, ipmi_devintf not loaded, or no BMC)")

// Info is what the provider needs to reach the BMC.
type Info struct {
	// Channel is the LAN channel Address was read from.
	Channel uint8
	// Address is empty when the BMC reports no IPv4 address (unconfigured, or 0.0.0.0).
	Address string
	Port    uint16
	// IPSource is how the BMC got Address: static, dhcp, bios, other or unspecified.
	IPSource string
	// User and UserID are set by Provision.
	User   string
	UserID uint8
}

// BMC is the part of go-ipmi's *client.Client used here, so the logic runs against a
// fake in tests.
type BMC interface {
	GetChannelInfo(ctx context.Context, channel uint8) (*app.GetChannelInfoResponse, error)
	GetLanConfigParamFor(ctx context.Context, channel uint8, param types.LanConfigParameter) error
	GetChannelAccess(ctx context.Context, channel uint8, opt types.ChannelAccessOption) (*app.GetChannelAccessResponse, error)
	SetChannelAccess(ctx context.Context, req *app.SetChannelAccessRequest) (*app.SetChannelAccessResponse, error)
	GetUserAccess(ctx context.Context, channel, userID uint8) (*app.GetUserAccessResponse, error)
	SetUserAccess(ctx context.Context, req *app.SetUserAccessRequest) (*app.SetUserAccessResponse, error)
	GetUsername(ctx context.Context, userID uint8) (*app.GetUsernameResponse, error)
	SetUsername(ctx context.Context, userID uint8, name string) (*app.SetUsernameResponse, error)
	SetUserPassword(ctx context.Context, userID uint8, password string, stored20 bool) (*app.SetUserPasswordResponse, error)
	EnableUser(ctx context.Context, userID uint8) error
}

var _ BMC = (*client.Client)(nil)

// deviceMu serializes use of the device: a read and a provisioning interleaved would
// still work, but one at a time keeps the BMC's view simple.
var deviceMu sync.Mutex

// Read returns the BMC's LAN address and port, read through the local interface.
func Read(ctx context.Context) (Info, error) {
	var info Info

	err := withDevice(ctx, func(b BMC) error {
		var err error

		info, err = ReadFrom(ctx, b)

		return err
	})

	return info, err
}

// Provision makes user an administrator able to log in over LAN with password, and
// returns where to reach the BMC. It is idempotent: a user already named so is reused.
func Provision(ctx context.Context, user, password string) (Info, error) {
	var info Info

	err := withDevice(ctx, func(b BMC) error {
		var err error

		info, err = ProvisionOn(ctx, b, user, password)

		return err
	})

	return info, err
}

func withDevice(ctx context.Context, f func(BMC) error) error {
	if _, err := os.Stat(DevicePath); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ErrNoDevice
		}

		return fmt.Errorf("error checking the local BMC interface: %w", err)
	}

	deviceMu.Lock()
	defer deviceMu.Unlock()

	c, err := client.NewOpenClient()
	if err != nil {
		return fmt.Errorf("error creating the IPMI client: %w", err)
	}

	// A BMC that does not answer must not hold an order for the driver's whole retry
	// budget on every command.
	c = c.WithTimeout(5 * time.Second)

	if err = c.Connect(ctx); err != nil {
		return fmt.Errorf("error opening %s: %w", DevicePath, err)
	}

	defer c.Close(ctx)

	return f(c)
}

// lanChannels lists the 802.3 LAN channels. Channel 0 is IPMB, 0x0E aliases the channel
// the request came in on (here the system interface) and 0x0F is the system interface.
func lanChannels(ctx context.Context, b BMC) ([]uint8, error) {
	var (
		channels []uint8
		lastErr  error
	)

	for ch := uint8(1); ch <= 0x0F; ch++ {
		if ch == 0x0E {
			continue
		}

		if err := ctx.Err(); err != nil {
			return nil, err
		}

		info, err := b.GetChannelInfo(ctx, ch)
		if err != nil {
			// An absent channel answers with an error code.
			lastErr = err

			continue
		}

		if info.ChannelMedium == types.ChannelMediumLAN {
			channels = append(channels, ch)
		}
	}

	if len(channels) == 0 {
		// The last answer tells a BMC without the command (QEMU's ipmi-bmc-sim answers
		// "invalid command") from one without a LAN channel.
		if lastErr != nil {
			return nil, fmt.Errorf("the BMC has no 802.3 LAN channel (channels 1-15; last answer: %w)", lastErr)
		}

		return nil, errors.New("the BMC has no 802.3 LAN channel (channels 1-15)")
	}

	return channels, nil
}

// ReadFrom reads the LAN address of the first LAN channel with one, else of the first.
func ReadFrom(ctx context.Context, b BMC) (Info, error) {
	channels, err := lanChannels(ctx, b)
	if err != nil {
		return Info{}, err
	}

	return readChannels(ctx, b, channels)
}

func readChannels(ctx context.Context, b BMC, channels []uint8) (Info, error) {
	var first *Info

	for _, ch := range channels {
		info, err := readChannel(ctx, b, ch)
		if err != nil {
			return Info{}, err
		}

		if info.Address != "" {
			return info, nil
		}

		if first == nil {
			first = &info
		}
	}

	return *first, nil
}

func readChannel(ctx context.Context, b BMC, ch uint8) (Info, error) {
	info := Info{Channel: ch, Port: DefaultPort}

	ip := &types.LanConfigParam_IP{}
	if err := b.GetLanConfigParamFor(ctx, ch, ip); err != nil {
		return Info{}, fmt.Errorf("error reading the IP address of BMC LAN channel %d: %w", ch, err)
	}

	if v4 := ip.IP.To4(); v4 != nil && !v4.Equal(net.IPv4zero) {
		info.Address = v4.String()
	}

	// The IP source and port are optional parameters: a BMC without them still works.
	src := &types.LanConfigParam_IPSource{}
	if err := b.GetLanConfigParamFor(ctx, ch, src); err == nil {
		info.IPSource = src.Source.String()
	}

	port := &types.LanConfigParam_PrimaryRMCPPort{}
	if err := b.GetLanConfigParamFor(ctx, ch, port); err == nil && port.Port != 0 {
		info.Port = port.Port
	}

	return info, nil
}

func validate(user, password string) error {
	switch {
	case user == "":
		return errors.New("the BMC user name is empty")
	case len(user) > maxUserLen:
		return fmt.Errorf("the BMC user name %q is %d bytes long; IPMI allows at most %d", user, len(user), maxUserLen)
	case strings.ContainsRune(user, 0):
		return errors.New("the BMC user name contains a NUL byte")
	case password == "":
		return errors.New("the BMC password is empty")
	case len(password) > maxPasswordLen:
		return fmt.Errorf("the BMC password is %d bytes long; IPMI 2.0 allows at most %d", len(password), maxPasswordLen)
	case strings.ContainsRune(password, 0):
		// IPMI pads passwords with NULs: one inside would cut it short.
		return errors.New("the BMC password contains a NUL byte")
	}

	return nil
}

// ProvisionOn is Provision against b.
func ProvisionOn(ctx context.Context, b BMC, user, password string) (Info, error) {
	info, err := provision(ctx, b, user, password)

	return info, redact(err, password)
}

func provision(ctx context.Context, b BMC, user, password string) (Info, error) {
	if err := validate(user, password); err != nil {
		return Info{}, err
	}

	channels, err := lanChannels(ctx, b)
	if err != nil {
		return Info{}, err
	}

	id, existing, err := findSlot(ctx, b, channels[0], user)
	if err != nil {
		return Info{}, err
	}

	if !existing {
		if _, err = b.SetUsername(ctx, id, user); err != nil {
			return Info{}, fmt.Errorf("error naming BMC user %d %q: %w", id, user, err)
		}
	}

	stored20 := len(password) > maxPassword16

	if _, err = b.SetUserPassword(ctx, id, password, stored20); err != nil {
		if _, ok := types.IsResponseError(err); ok && stored20 {
			return Info{}, fmt.Errorf("error setting the password of BMC user %d %q (the BMC may not take 20-byte passwords; use at most 16 bytes): %w", id, user, err)
		}

		return Info{}, fmt.Errorf("error setting the password of BMC user %d %q: %w", id, user, err)
	}

	if err = b.EnableUser(ctx, id); err != nil {
		return Info{}, fmt.Errorf("error enabling BMC user %d %q: %w", id, user, err)
	}

	for _, ch := range channels {
		if _, err = b.SetUserAccess(ctx, &app.SetUserAccessRequest{
			EnableChanging:      true,
			EnableIPMIMessaging: true,
			ChannelNumber:       ch,
			UserID:              id,
			MaxPrivLevel:        uint8(types.PrivilegeLevelAdministrator),
		}); err != nil {
			return Info{}, fmt.Errorf("error granting BMC user %d %q administrator access on channel %d: %w", id, user, ch, err)
		}

		if err = allowLANLogins(ctx, b, ch); err != nil {
			return Info{}, err
		}
	}

	info, err := readChannels(ctx, b, channels)
	if err != nil {
		return Info{}, err
	}

	info.User, info.UserID = user, id

	return info, nil
}

// findSlot returns the user ID named user, else the first free one. Slot 1 is the
// anonymous (null) user on many BMCs and fixed-name slots cannot be renamed: neither is
// taken.
func findSlot(ctx context.Context, b BMC, ch uint8, user string) (id uint8, existing bool, err error) {
	access, err := b.GetUserAccess(ctx, ch, 1)
	if err != nil {
		return 0, false, fmt.Errorf("error reading the BMC's user count: %w", err)
	}

	// User IDs are 6 bits wide.
	maxID := min(access.MaxUsersIDCount, 63)
	fixed := access.FixedNameUseIDsCount

	var free uint8

	for i := uint8(1); i <= maxID; i++ {
		if err = ctx.Err(); err != nil {
			return 0, false, err
		}

		name, err := username(ctx, b, i)
		if err != nil {
			return 0, false, err
		}

		if name == user {
			return i, true, nil
		}

		if name == "" && i >= 2 && i > fixed && free == 0 {
			free = i
		}
	}

	if free == 0 {
		return 0, false, fmt.Errorf("no free BMC user slot for %q: user IDs 2-%d are all named", user, maxID)
	}

	return free, false, nil
}

// username reads a slot's name; some BMCs answer "invalid data field" for an unset one.
func username(ctx context.Context, b BMC, id uint8) (string, error) {
	res, err := b.GetUsername(ctx, id)
	if err != nil {
		if respErr, ok := types.IsResponseError(err); ok && respErr.CompletionCode() == types.CodeRequestDataFieldInvalid {
			return "", nil
		}

		return "", fmt.Errorf("error reading the name of BMC user %d: %w", id, err)
	}

	return res.Username, nil
}

// allowLANLogins raises the channel's access mode and privilege limit where they would
// refuse an administrator's LAN session, in both the stored and the active settings; the
// other settings, which other users rely on, are kept.
func allowLANLogins(ctx context.Context, b BMC, ch uint8) error {
	for _, opt := range []types.ChannelAccessOption{types.ChannelAccessOption_NonVolatile, types.ChannelAccessOption_Volatile} {
		cur, err := b.GetChannelAccess(ctx, ch, opt)
		if err != nil {
			return fmt.Errorf("error reading the access of BMC channel %d: %w", ch, err)
		}

		mode := cur.AccessMode
		if mode == types.ChannelAccessMode_Disabled || mode == types.ChannelAccessMode_PrebootOnly {
			mode = types.ChannelAccessMode_AlwaysAvailable
		}

		priv := cur.MaxPrivilegeLevel
		if priv < types.PrivilegeLevelAdministrator {
			priv = types.PrivilegeLevelAdministrator
		}

		if mode == cur.AccessMode && priv == cur.MaxPrivilegeLevel {
			continue
		}

		// Get and Set number the option alike: 1 non-volatile, 2 volatile.
		if _, err = b.SetChannelAccess(ctx, &app.SetChannelAccessRequest{
			ChannelNumber:        ch,
			AccessOption:         uint8(opt),
			DisablePEFAlerting:   cur.PEFAlertingDisabled,
			DisablePerMsgAuth:    cur.PerMsgAuthDisabled,
			DisableUserLevelAuth: cur.UserLevelAuthDisabled,
			AccessMode:           mode,
			PrivilegeOption:      uint8(opt),
			MaxPrivilegeLevel:    uint8(priv),
		}); err != nil {
			return fmt.Errorf("error allowing LAN logins on BMC channel %d: %w", ch, err)
		}
	}

	return nil
}

// redact keeps the password out of an error whatever a lower layer put in its message.
func redact(err error, password string) error {
	if err == nil || password == "" || !strings.Contains(err.Error(), password) {
		return err
	}

	return errors.New(strings.ReplaceAll(err.Error(), password, "<redacted>"))
}
