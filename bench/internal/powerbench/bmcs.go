package powerbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/bougou/go-ipmi/pkg/bmc"
	"github.com/bougou/go-ipmi/pkg/hal"
	"github.com/bougou/go-ipmi/pkg/hal/mock"
	"github.com/bougou/go-ipmi/pkg/server"
	"github.com/bougou/go-ipmi/pkg/transport/udp"
	"github.com/bougou/go-ipmi/pkg/types"
)

// Credentials of every simulated BMC.
const (
	bmcUser     = "anvil"
	bmcPassword = "bench-password"
)

// fleet is n go-ipmi BMC servers in this process, each on its own loopback UDP port.
type fleet struct {
	ports    []int
	chassis  []*chassis
	servers  []*server.Server
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	serveErr error
	mu       sync.Mutex
}

// startFleet starts n BMCs; every odd one runs (so a sweep sees both states). stop
// ends them all.
func startFleet(ctx context.Context, n int) (*fleet, error) {
	ctx, cancel := context.WithCancel(ctx)
	f := &fleet{cancel: cancel}

	for i := range n {
		ch := &chassis{on: i%2 == 1}
		h := &machine{HAL: mock.New(), chassis: ch}

		var guid [16]byte
		copy(guid[:], fmt.Sprintf("anvil-bench-%04d", i))

		b := bmc.New(bmc.DeviceInfo{DeviceID: 32, IPMIVersion: 0x20, ManufacturerID: 0x000157, ProductID: 1}, guid, h,
			bmc.WithV15Disabled())

		user, err := b.Users.Add(2, bmcUser)
		if err != nil {
			_ = f.stop() // the error to report is err

			return nil, fmt.Errorf("error adding the BMC user: %w", err)
		}

		user.SetPassword([]byte(bmcPassword))
		user.Enabled = true
		user.ChannelAccess[1] = bmc.UserChannelAccess{MaxPrivilege: bmc.PrivilegeLevelAdministrator, Enabled: true}

		conn, err := udp.Listen("127.0.0.1:0")
		if err != nil {
			_ = f.stop() // the error to report is err

			return nil, fmt.Errorf("error listening for BMC %d: %w", i, err)
		}

		srv := server.NewServer(b, conn)

		f.ports = append(f.ports, conn.LocalAddr().(*net.UDPAddr).Port) //nolint:forcetypeassert // a UDP socket's address
		f.chassis = append(f.chassis, ch)
		f.servers = append(f.servers, srv)
		f.wg.Add(1)

		go func() {
			defer f.wg.Done()

			if err := srv.Serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
				f.mu.Lock()
				f.serveErr = errors.Join(f.serveErr, err)
				f.mu.Unlock()
			}
		}()
	}

	return f, nil
}

// stop closes every server and waits for their loops; it reports a server that failed.
func (f *fleet) stop() error {
	f.cancel()

	for _, s := range f.servers {
		s.Close()
	}

	f.wg.Wait()

	f.mu.Lock()
	defer f.mu.Unlock()

	return f.serveErr
}

// machine is go-ipmi's mock hardware with a chassis that keeps the power state.
type machine struct {
	*mock.HAL

	chassis *chassis
}

func (m *machine) Chassis() hal.ChassisHAL { return m.chassis }

// chassis is a machine whose power follows chassis control: on, off, a cycle or a
// reset of a running machine leaves it running (and is counted).
type chassis struct {
	mu        sync.Mutex
	on        bool
	restarts  int
	bootFlags *types.BootOptionParam_BootFlags
}

func (c *chassis) PowerState(context.Context) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()

	return c.on, nil
}

func (c *chassis) SetPower(_ context.Context, on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()

	c.on = on

	return nil
}

func (c *chassis) restart() error {
	c.mu.Lock()
	defer c.mu.Unlock()

	if !c.on {
		return errors.New("machine is off")
	}

	c.restarts++

	return nil
}

func (c *chassis) PowerCycle(context.Context) error { return c.restart() }
func (c *chassis) ColdReset(context.Context) error  { return c.restart() }
func (c *chassis) WarmReset(context.Context) error  { return c.restart() }

func (c *chassis) Identify(context.Context, uint8) error { return nil }

func (c *chassis) IntrusionState(context.Context) (bool, error) { return false, hal.ErrNotSupported }

func (c *chassis) SetBootFlags(_ context.Context, flags *types.BootOptionParam_BootFlags) error {
	c.mu.Lock()
	defer c.mu.Unlock()

	cp := *flags
	c.bootFlags = &cp

	return nil
}

func (c *chassis) GetBootFlags(context.Context) (*types.BootOptionParam_BootFlags, error) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if c.bootFlags == nil {
		return nil, hal.ErrNotSupported
	}

	cp := *c.bootFlags

	return &cp, nil
}

func (c *chassis) SetBootInfoAcknowledge(context.Context, *types.BootOptionParam_BootInfoAcknowledge) error {
	return nil
}

func (c *chassis) GetBootInfoAcknowledge(context.Context) (*types.BootOptionParam_BootInfoAcknowledge, error) {
	return &types.BootOptionParam_BootInfoAcknowledge{}, nil
}
