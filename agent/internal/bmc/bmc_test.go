package bmc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/bougou/go-ipmi/pkg/command/app"
	"github.com/bougou/go-ipmi/pkg/types"
)

type fakeUser struct {
	name     string
	password string
	stored20 bool
	enabled  bool
	// access is the user's privilege per channel; IPMI messaging per channel.
	priv map[uint8]types.PrivilegeLevel
	ipmi map[uint8]bool
}

type fakeLAN struct {
	ip   net.IP
	src  types.LanIPAddressSource
	port uint16 // 0: the parameter is not supported
}

// fakeBMC keeps a user table and channels, like a BMC would.
type fakeBMC struct {
	media  map[uint8]types.ChannelMedium
	lan    map[uint8]fakeLAN
	users  []*fakeUser // index 0 unused; len-1 is the max user ID
	fixed  uint8
	access map[uint8]map[types.ChannelAccessOption]*app.GetChannelAccessResponse
	// failPassword, when set, is the BMC's answer to Set User Password.
	failPassword error
	calls        []string
}

var errInvalid = types.NewResponseError(types.CodeRequestDataFieldInvalid, "invalid")

func newFake(names ...string) *fakeBMC {
	f := &fakeBMC{
		media: map[uint8]types.ChannelMedium{1: types.ChannelMediumLAN, 2: types.ChannelMediumSerial},
		lan:   map[uint8]fakeLAN{1: {ip: net.IPv4(10, 0, 0, 9), src: types.IPAddressSourceDHCP}},
		users: []*fakeUser{nil},
		access: map[uint8]map[types.ChannelAccessOption]*app.GetChannelAccessResponse{
			1: {
				types.ChannelAccessOption_NonVolatile: {AccessMode: types.ChannelAccessMode_AlwaysAvailable, MaxPrivilegeLevel: types.PrivilegeLevelAdministrator},
				types.ChannelAccessOption_Volatile:    {AccessMode: types.ChannelAccessMode_AlwaysAvailable, MaxPrivilegeLevel: types.PrivilegeLevelAdministrator},
			},
		},
	}

	for _, n := range names {
		f.users = append(f.users, &fakeUser{name: n, priv: map[uint8]types.PrivilegeLevel{}, ipmi: map[uint8]bool{}})
	}

	return f
}

func (f *fakeBMC) user(id uint8) (*fakeUser, error) {
	if id == 0 || int(id) >= len(f.users) {
		return nil, errInvalid
	}

	return f.users[id], nil
}

func (f *fakeBMC) GetChannelInfo(_ context.Context, ch uint8) (*app.GetChannelInfoResponse, error) {
	m, ok := f.media[ch]
	if !ok {
		return nil, errInvalid
	}

	return &app.GetChannelInfoResponse{ActualChannelNumber: ch, ChannelMedium: m}, nil
}

func (f *fakeBMC) GetLanConfigParamFor(_ context.Context, ch uint8, param types.LanConfigParameter) error {
	l, ok := f.lan[ch]
	if !ok {
		return errInvalid
	}

	switch p := param.(type) {
	case *types.LanConfigParam_IP:
		p.IP = l.ip
	case *types.LanConfigParam_IPSource:
		p.Source = l.src
	case *types.LanConfigParam_PrimaryRMCPPort:
		if l.port == 0 {
			return types.NewResponseError(0x80, "parameter not supported")
		}

		p.Port = l.port
	default:
		return fmt.Errorf("unexpected parameter %T", param)
	}

	return nil
}

func (f *fakeBMC) GetChannelAccess(_ context.Context, ch uint8, opt types.ChannelAccessOption) (*app.GetChannelAccessResponse, error) {
	a, ok := f.access[ch][opt]
	if !ok {
		return nil, errInvalid
	}

	c := *a

	return &c, nil
}

func (f *fakeBMC) SetChannelAccess(_ context.Context, req *app.SetChannelAccessRequest) (*app.SetChannelAccessResponse, error) {
	f.calls = append(f.calls, fmt.Sprintf("set-channel-access %d %d", req.ChannelNumber, req.AccessOption))

	if req.AccessOption != req.PrivilegeOption {
		return nil, errInvalid
	}

	f.access[req.ChannelNumber][types.ChannelAccessOption(req.AccessOption)] = &app.GetChannelAccessResponse{
		PEFAlertingDisabled:   req.DisablePEFAlerting,
		PerMsgAuthDisabled:    req.DisablePerMsgAuth,
		UserLevelAuthDisabled: req.DisableUserLevelAuth,
		AccessMode:            req.AccessMode,
		MaxPrivilegeLevel:     types.PrivilegeLevel(req.MaxPrivilegeLevel),
	}

	return &app.SetChannelAccessResponse{}, nil
}

func (f *fakeBMC) GetUserAccess(_ context.Context, ch, id uint8) (*app.GetUserAccessResponse, error) {
	u, err := f.user(id)
	if err != nil {
		return nil, err
	}

	return &app.GetUserAccessResponse{
		MaxUsersIDCount:      uint8(len(f.users) - 1),
		FixedNameUseIDsCount: f.fixed,
		IPMIMessagingEnabled: u.ipmi[ch],
		MaxPrivLevel:         u.priv[ch],
	}, nil
}

func (f *fakeBMC) SetUserAccess(_ context.Context, req *app.SetUserAccessRequest) (*app.SetUserAccessResponse, error) {
	u, err := f.user(req.UserID)
	if err != nil {
		return nil, err
	}

	f.calls = append(f.calls, fmt.Sprintf("set-user-access %d %d", req.ChannelNumber, req.UserID))

	if req.EnableChanging {
		u.ipmi[req.ChannelNumber] = req.EnableIPMIMessaging
	}

	u.priv[req.ChannelNumber] = types.PrivilegeLevel(req.MaxPrivLevel)

	return &app.SetUserAccessResponse{}, nil
}

func (f *fakeBMC) GetUsername(_ context.Context, id uint8) (*app.GetUsernameResponse, error) {
	u, err := f.user(id)
	if err != nil {
		return nil, err
	}

	if u.name == "" && id%2 == 0 {
		// Some BMCs answer an unset name with an error code.
		return nil, errInvalid
	}

	return &app.GetUsernameResponse{Username: u.name}, nil
}

func (f *fakeBMC) SetUsername(_ context.Context, id uint8, name string) (*app.SetUsernameResponse, error) {
	u, err := f.user(id)
	if err != nil {
		return nil, err
	}

	f.calls = append(f.calls, fmt.Sprintf("set-username %d %s", id, name))
	u.name = name

	return &app.SetUsernameResponse{}, nil
}

func (f *fakeBMC) SetUserPassword(_ context.Context, id uint8, password string, stored20 bool) (*app.SetUserPasswordResponse, error) {
	u, err := f.user(id)
	if err != nil {
		return nil, err
	}

	f.calls = append(f.calls, fmt.Sprintf("set-password %d %v", id, stored20))

	if f.failPassword != nil {
		return nil, f.failPassword
	}

	// go-ipmi truncates silently; a real BMC would store the truncated password.
	if (!stored20 && len(password) > 16) || len(password) > 20 {
		return nil, errors.New("password truncated")
	}

	u.password, u.stored20 = password, stored20

	return &app.SetUserPasswordResponse{}, nil
}

func (f *fakeBMC) EnableUser(_ context.Context, id uint8) error {
	u, err := f.user(id)
	if err != nil {
		return err
	}

	f.calls = append(f.calls, fmt.Sprintf("enable %d", id))
	u.enabled = true

	return nil
}

func TestReadFrom(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		setup   func(*fakeBMC)
		want    Info
		wantErr string
	}{
		{
			name: "channel 1",
			want: Info{Channel: 1, Address: "10.0.0.9", Port: 623, IPSource: "dhcp"},
		},
		{
			name: "vendor port",
			setup: func(f *fakeBMC) {
				f.lan[1] = fakeLAN{ip: net.IPv4(10, 0, 0, 9), src: types.IPAddressSourceStatic, port: 6230}
			},
			want: Info{Channel: 1, Address: "10.0.0.9", Port: 6230, IPSource: "static"},
		},
		{
			name: "first channel without address",
			setup: func(f *fakeBMC) {
				f.lan[1] = fakeLAN{ip: net.IPv4zero}
				f.media[8] = types.ChannelMediumLAN
				f.lan[8] = fakeLAN{ip: net.IPv4(192, 168, 1, 20), src: types.IPAddressSourceStatic}
			},
			want: Info{Channel: 8, Address: "192.168.1.20", Port: 623, IPSource: "static"},
		},
		{
			name:  "no address at all",
			setup: func(f *fakeBMC) { f.lan[1] = fakeLAN{ip: net.IPv4zero} },
			want:  Info{Channel: 1, Port: 623, IPSource: "unspecified"},
		},
		{
			name:    "no LAN channel",
			setup:   func(f *fakeBMC) { delete(f.media, 1) },
			wantErr: "no 802.3 LAN channel",
		},
		{
			name:    "IP address unreadable",
			setup:   func(f *fakeBMC) { delete(f.lan, 1) },
			wantErr: "error reading the IP address of BMC LAN channel 1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			f := newFake("", "root")
			if tc.setup != nil {
				tc.setup(f)
			}

			got, err := ReadFrom(t.Context(), f)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}

				return
			}

			if err != nil {
				t.Fatal(err)
			}

			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestProvisionOn(t *testing.T) {
	t.Parallel()

	const secret = "s3cr3t-Passw0rd"

	for _, tc := range []struct {
		name     string
		users    []string
		setup    func(*fakeBMC)
		user     string
		password string
		wantID   uint8
		wantErr  string
		// wantNoCalls: validation fails before the BMC is changed.
		wantNoCalls bool
		check       func(*testing.T, *fakeBMC)
	}{
		{
			name:     "first free slot, not the null user",
			users:    []string{"", "root", "", ""},
			user:     "anvil",
			password: secret,
			wantID:   3,
			check: func(t *testing.T, f *fakeBMC) {
				if f.users[1].name != "" || f.users[2].name != "root" || f.users[4].name != "" {
					t.Fatalf("other users changed: %q %q %q", f.users[1].name, f.users[2].name, f.users[4].name)
				}
			},
		},
		{
			name:     "free slot answered with an error code",
			users:    []string{"", "root", "x", ""},
			user:     "anvil",
			password: secret,
			wantID:   4,
		},
		{
			name:     "fixed-name slots skipped",
			users:    []string{"", "", "", ""},
			setup:    func(f *fakeBMC) { f.fixed = 2 },
			user:     "anvil",
			password: secret,
			wantID:   3,
		},
		{
			name:     "own user reused",
			users:    []string{"", "root", "", "anvil"},
			user:     "anvil",
			password: secret,
			wantID:   4,
			check: func(t *testing.T, f *fakeBMC) {
				for _, c := range f.calls {
					if strings.HasPrefix(c, "set-username") {
						t.Fatalf("reused user renamed: %v", f.calls)
					}
				}

				if f.users[3].name != "" {
					t.Fatal("a free slot was taken although the user exists")
				}
			},
		},
		{
			name:     "no free slot",
			users:    []string{"", "root", "admin"},
			user:     "anvil",
			password: secret,
			wantErr:  `no free BMC user slot for "anvil": user IDs 2-3 are all named`,
			check: func(t *testing.T, f *fakeBMC) {
				if len(f.calls) != 0 {
					t.Fatalf("BMC changed: %v", f.calls)
				}
			},
		},
		{
			name:        "name of 17 bytes",
			users:       []string{"", ""},
			user:        "a-very-long-name1",
			password:    secret,
			wantErr:     "is 17 bytes long; IPMI allows at most 16",
			wantNoCalls: true,
		},
		{
			name:        "empty name",
			users:       []string{"", ""},
			password:    secret,
			wantErr:     "user name is empty",
			wantNoCalls: true,
		},
		{
			name:     "password of 16 bytes in the 16-byte form",
			users:    []string{"", ""},
			user:     "anvil",
			password: "0123456789abcdef",
			wantID:   2,
			check: func(t *testing.T, f *fakeBMC) {
				if f.users[2].stored20 {
					t.Fatal("16-byte password stored as 20")
				}
			},
		},
		{
			name:     "password of 20 bytes in the 20-byte form",
			users:    []string{"", ""},
			user:     "anvil",
			password: "0123456789abcdef0123",
			wantID:   2,
			check: func(t *testing.T, f *fakeBMC) {
				if !f.users[2].stored20 {
					t.Fatal("20-byte password not stored as 20")
				}
			},
		},
		{
			name:        "password of 21 bytes",
			users:       []string{"", ""},
			user:        "anvil",
			password:    "0123456789abcdef01234",
			wantErr:     "password is 21 bytes long; IPMI 2.0 allows at most 20",
			wantNoCalls: true,
		},
		{
			name:        "empty password",
			users:       []string{"", ""},
			user:        "anvil",
			wantErr:     "password is empty",
			wantNoCalls: true,
		},
		{
			name:        "password with a NUL",
			users:       []string{"", ""},
			user:        "anvil",
			password:    "abc\x00def",
			wantErr:     "password contains a NUL byte",
			wantNoCalls: true,
		},
		{
			name:  "BMC refuses a 20-byte password",
			users: []string{"", ""},
			setup: func(f *fakeBMC) {
				f.failPassword = types.NewResponseError(types.CodeRequestDataFieldInvalid, "invalid")
			},
			user:     "anvil",
			password: "0123456789abcdef0123",
			wantErr:  "may not take 20-byte passwords",
		},
		{
			name:     "lower layer echoes the password",
			users:    []string{"", ""},
			setup:    func(f *fakeBMC) { f.failPassword = errors.New("request 01 " + secret + " rejected") },
			user:     "anvil",
			password: secret,
			wantErr:  "request 01 <redacted> rejected",
		},
		{
			name:  "channel access opened, other settings kept",
			users: []string{"", ""},
			setup: func(f *fakeBMC) {
				f.access[1][types.ChannelAccessOption_NonVolatile] = &app.GetChannelAccessResponse{
					PEFAlertingDisabled: true, AccessMode: types.ChannelAccessMode_Disabled, MaxPrivilegeLevel: types.PrivilegeLevelOperator,
				}
				f.access[1][types.ChannelAccessOption_Volatile] = &app.GetChannelAccessResponse{
					AccessMode: types.ChannelAccessMode_Shared, MaxPrivilegeLevel: types.PrivilegeLevelOEM,
				}
			},
			user:     "anvil",
			password: secret,
			wantID:   2,
			check: func(t *testing.T, f *fakeBMC) {
				nv := f.access[1][types.ChannelAccessOption_NonVolatile]
				if !nv.PEFAlertingDisabled || nv.AccessMode != types.ChannelAccessMode_AlwaysAvailable || nv.MaxPrivilegeLevel != types.PrivilegeLevelAdministrator {
					t.Fatalf("non-volatile access = %+v", nv)
				}

				for _, c := range f.calls {
					if c == "set-channel-access 1 2" {
						t.Fatal("volatile access that allows admin LAN logins was rewritten")
					}
				}
			},
		},
		{
			name:  "every LAN channel",
			users: []string{"", ""},
			setup: func(f *fakeBMC) {
				f.media[3] = types.ChannelMediumLAN
				f.lan[3] = fakeLAN{ip: net.IPv4(10, 0, 1, 9)}
				f.access[3] = f.access[1]
			},
			user:     "anvil",
			password: secret,
			wantID:   2,
			check: func(t *testing.T, f *fakeBMC) {
				if f.users[2].priv[3] != types.PrivilegeLevelAdministrator || !f.users[2].ipmi[3] {
					t.Fatal("user not granted access on the second LAN channel")
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			f := newFake(tc.users...)
			if tc.setup != nil {
				tc.setup(f)
			}

			info, err := ProvisionOn(t.Context(), f, tc.user, tc.password)

			if err != nil && tc.password != "" && strings.Contains(err.Error(), tc.password) {
				t.Fatalf("error contains the password: %v", err)
			}

			if tc.check != nil {
				defer tc.check(t, f)
			}

			if tc.wantNoCalls && len(f.calls) != 0 {
				t.Fatalf("BMC changed: %v", f.calls)
			}

			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}

				return
			}

			if err != nil {
				t.Fatal(err)
			}

			want := Info{Channel: 1, Address: "10.0.0.9", Port: 623, IPSource: "dhcp", User: tc.user, UserID: tc.wantID}
			if info != want {
				t.Fatalf("got %+v, want %+v", info, want)
			}

			u := f.users[tc.wantID]
			if u.name != tc.user || u.password != tc.password || !u.enabled {
				t.Fatalf("user %d = name %q, enabled %v, password set %v", tc.wantID, u.name, u.enabled, u.password == tc.password)
			}

			if u.priv[1] != types.PrivilegeLevelAdministrator || !u.ipmi[1] {
				t.Fatalf("user %d access on channel 1 = %v, IPMI messaging %v", tc.wantID, u.priv[1], u.ipmi[1])
			}

			// Idempotent: a second run reuses the slot and changes no name.
			f.calls = nil

			again, err := ProvisionOn(t.Context(), f, tc.user, tc.password)
			if err != nil {
				t.Fatal(err)
			}

			if again != want {
				t.Fatalf("second run got %+v, want %+v", again, want)
			}

			for _, c := range f.calls {
				if strings.HasPrefix(c, "set-username") || strings.HasPrefix(c, "set-channel-access") {
					t.Fatalf("second run changed more than the password: %v", f.calls)
				}
			}
		})
	}
}

func TestNoDevice(t *testing.T) {
	t.Parallel()

	if _, err := os.Stat(DevicePath); err == nil {
		t.Skip(DevicePath + " exists on this machine")
	}

	if _, err := Read(t.Context()); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Read error = %v, want ErrNoDevice", err)
	}

	_, err := Provision(t.Context(), "anvil", "hunter2")
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Provision error = %v, want ErrNoDevice", err)
	}

	if !strings.Contains(err.Error(), "/dev/ipmi0 missing") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("Provision error = %v", err)
	}
}
