package fleetsim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/agent/internal/config"
	"github.com/anvil-metal/anvil/agent/internal/orders"
	"github.com/anvil-metal/anvil/agent/internal/session"
	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
)

// signal is something done to a machine from outside: its BMC (the power API) or a
// stdin command.
type signal struct {
	kind string // on, off, cycle, powercut, cut, restore, reboot
	by   string
}

// Machine states (GET /machines, /status).
const (
	stateOff     = "off"
	stateBooting = "booting"
	stateAgent   = "agent"
	stateTalos   = "talos"
)

// maxScript bounds a boot script read: they are a few hundred bytes.
const maxScript = 64 << 10

// machine is one simulated machine.
type machine struct {
	fleet     *Fleet
	id        identity
	macs      []string
	inventory [][]byte
	logger    *zap.Logger
	signals   chan signal

	mu        sync.Mutex
	state     string
	boot      int
	session   int
	connected bool
	cut       bool
}

// Status is a machine as GET /machines shows it.
type Status struct {
	Index     int    `json:"index"`
	Machine   string `json:"machine"`
	State     string `json:"state"`
	Boot      int    `json:"boot"`
	Session   int    `json:"session"`
	Connected bool   `json:"connected"`
}

func (m *machine) status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()

	return Status{Index: m.id.Index, Machine: m.id.UUID, State: m.state, Boot: m.boot, Session: m.session, Connected: m.connected}
}

func (m *machine) setState(s string) {
	m.mu.Lock()
	m.state = s
	m.mu.Unlock()
}

func (m *machine) emit(e Event) {
	idx := m.id.Index
	e.Machine, e.Index = m.id.UUID, &idx
	m.fleet.events.emit(e)
}

// send hands a signal to the machine's run; a machine that has not taken its last few
// refuses more (a person pressing its buttons too fast).
func (m *machine) send(s signal) error {
	select {
	case m.signals <- s:
		return nil
	default:
		return fmt.Errorf("machine %s is busy", m.id.UUID)
	}
}

// run is the machine's life: boot, run what the boot script says, and do what its
// power and orders say, until ctx is done.
func (m *machine) run(ctx context.Context) {
	on, delay, by := true, time.Duration(0), ""

	for ctx.Err() == nil {
		if !on {
			m.setState(stateOff)
			m.emit(Event{Event: "power", State: "off", By: by})

			if on, by = m.waitPowerOn(ctx); !on {
				return
			}

			m.emit(Event{Event: "power", State: "on", By: by})
		}

		if delay > 0 {
			if sleep(ctx, delay) != nil {
				return
			}
		}

		var e ending

		e, by = m.bootOnce(ctx)

		switch e {
		case endReboot:
			on, delay = true, m.fleet.cfg.RebootDelay
			m.emit(Event{Event: "rebooting", Boot: m.boot, By: by})
		case endOff, endPowerCut:
			on, delay = false, 0
		case endKexec: // bootOnce waits while "Talos" runs
		}
	}
}

// waitPowerOn waits for power to come back, and says who gave it; false when ctx is done.
func (m *machine) waitPowerOn(ctx context.Context) (bool, string) {
	for {
		select {
		case <-ctx.Done():
			return false, ""
		case s := <-m.signals:
			switch s.kind {
			case "on", "cycle", "reboot":
				return true, s.by
			case "cut":
				m.setCut(true)
			case "restore":
				m.setCut(false)
			}
		}
	}
}

func (m *machine) setCut(cut bool) {
	m.mu.Lock()
	m.cut = cut
	m.mu.Unlock()
}

func (m *machine) isCut() bool {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.cut
}

// bootOnce PXE-boots the machine and runs what it booted until that ends.
func (m *machine) bootOnce(ctx context.Context) (ending, string) {
	m.mu.Lock()
	m.boot++
	m.session = 0
	m.state = stateBooting
	m.mu.Unlock()

	for {
		decision, cfg, status, err := m.fetchScript(ctx)

		ev := Event{Event: "boot-script", Boot: m.boot, MAC: m.macs[0], Decision: decision}
		if status != 0 {
			ev.Status = fmt.Sprint(status)
		}

		if err != nil {
			ev.Error = err.Error()
		}

		m.emit(ev)

		switch decision {
		case decisionAgent:
			m.setState(stateAgent)

			e, by := m.runAgent(ctx, cfg)
			if e != endKexec {
				return e, by
			}

			m.setState(stateTalos)
			m.emit(Event{Event: "talos", Boot: m.boot, Via: "kexec"})

			return m.runTalos(ctx)
		case decisionTalos, decisionDisk:
			m.setState(stateTalos)
			m.emit(Event{Event: "talos", Boot: m.boot, Via: map[string]string{decisionTalos: "pxe", decisionDisk: "disk"}[decision]})

			return m.runTalos(ctx)
		}

		// iPXE retries its chain; a power action meanwhile wins.
		select {
		case <-ctx.Done():
			return endOff, ""
		case s := <-m.signals:
			if e, ok := m.powerSignal(s); ok {
				return e, s.by
			}
		case <-time.After(m.fleet.cfg.BootRetry):
		}
	}
}

// powerSignal says how a signal ends what the machine runs; false for one that does not.
func (m *machine) powerSignal(s signal) (ending, bool) {
	switch s.kind {
	case "off":
		return endOff, true
	case "powercut":
		return endPowerCut, true
	case "cycle", "reboot":
		return endReboot, true
	case "cut":
		m.setCut(true)
	case "restore":
		m.setCut(false)
	}

	return 0, false
}

// runTalos is "Talos" running: nothing is said to the provider until power changes.
func (m *machine) runTalos(ctx context.Context) (ending, string) {
	for {
		select {
		case <-ctx.Done():
			return endOff, ""
		case s := <-m.signals:
			if e, ok := m.powerSignal(s); ok {
				return e, s.by
			}
		}
	}
}

func (m *machine) fetchScript(ctx context.Context) (string, config.Config, int, error) {
	f := m.fleet

	select {
	case f.bootSlots <- struct{}{}:
		defer func() { <-f.bootSlots }()
	case <-ctx.Done():
		return decisionRetry, config.Config{}, 0, ctx.Err()
	}

	// What iPXE asks: ${uuid}, ${net0/mac:hexhyp}, ${buildarch}, ${platform}.
	url := f.cfg.ProviderURL + "/ipxe/boot.ipxe?uuid=" + m.id.UUID + "&mac=" + strings.ReplaceAll(m.macs[0], ":", "-") +
		"&arch=x86_64&platform=efi"

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return decisionRetry, config.Config{}, 0, fmt.Errorf("error making the boot script request: %w", err)
	}

	resp, err := f.client.Do(req)
	if err != nil {
		return decisionRetry, config.Config{}, 0, fmt.Errorf("error fetching the boot script: %w", err)
	}

	defer resp.Body.Close()

	body, err := io.ReadAll(io.LimitReader(resp.Body, maxScript))
	if err != nil {
		return decisionRetry, config.Config{}, resp.StatusCode, fmt.Errorf("error reading the boot script: %w", err)
	}

	decision, cfg, kernel := readScript(resp.StatusCode, string(body))

	if decision == decisionTalos && f.cfg.TalosChain {
		// iPXE fetches the kernel (from the Image Factory without the provider's cache);
		// when that fails, the machine boots again.
		if err := m.fetchChain(ctx, kernel); err != nil {
			return decisionRetry, config.Config{}, resp.StatusCode, err
		}
	}

	return decision, cfg, resp.StatusCode, nil
}

// fetchChain fetches the Talos kernel the script boots (its start: the body is read and
// dropped, bounded).
func (m *machine) fetchChain(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("error making the Talos chain request: %w", err)
	}

	resp, err := m.fleet.client.Do(req)
	if err != nil {
		return fmt.Errorf("error fetching the Talos chain %s: %w", url, err)
	}

	defer resp.Body.Close()

	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxScript)) // only its arrival matters

	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the Talos chain %s answered %s", url, resp.Status)
	}

	return nil
}

// runAgent runs the agent the machine booted: the real session and order executor with
// simulated actions, until an order, the power or a stdin command ends it.
func (m *machine) runAgent(ctx context.Context, cfg config.Config) (ending, string) {
	agentCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	ends := make(chan ending, 1)
	boot := m.boot
	kinds := &orderKinds{kinds: map[string]string{}}

	exec := orders.New(&actions{m: m, ends: ends}, m.logger.Named("orders"))
	exec.OnStart(func(o *agentv1.Order) {
		if kind := agentv1.OrderKind(o); kind != agentv1.OrderKindHold && kind != agentv1.OrderKindRelease {
			m.emit(orderEvent("order-started", boot, o))
		}
	})

	var wg sync.WaitGroup

	wg.Go(func() { exec.Run(agentCtx) })
	wg.Go(func() { m.watchResults(agentCtx, exec, boot, kinds) })

	defer func() {
		cancel() // the executor and the watcher stop with agentCtx
		wg.Wait()
	}()

	opts := session.Options{
		Config: cfg, BootID: newBootID(), AgentVersion: m.fleet.cfg.AgentVersion,
		MACs:      func() []string { return m.macs },
		Inventory: func(context.Context) ([][]byte, <-chan struct{}, error) { return m.inventory, nil, nil },
		Executor:  exec,
		Logger:    m.logger.Named("session"),
		OnRegistered: func() {
			m.mu.Lock()
			m.session++
			m.connected = true
			n := m.session
			m.mu.Unlock()

			m.emit(Event{Event: "registered", Boot: boot, Session: n})
		},
		OnOrder: func(o *agentv1.Order) {
			kinds.set(o.GetId(), agentv1.OrderKind(o))
			m.emit(orderEvent("order-received", boot, o))
		},
		OnClosed: func(err error) {
			m.mu.Lock()
			was, n := m.connected, m.session
			m.connected = false
			m.mu.Unlock()

			ev := Event{Event: "session-closed", Boot: boot, Session: n}
			if err != nil {
				ev.Error = err.Error()
			}

			if was || (err != nil && !errors.Is(err, context.Canceled)) {
				m.emit(ev)
			}
		},
	}

	if !m.fleet.cfg.Kexec {
		opts.KexecUnavailable = "simulated machine: kexec off"
	}

	for {
		// A cut network: no session until it is restored; the executor keeps going.
		for m.isCut() {
			select {
			case <-ctx.Done():
				return endOff, ""
			case e := <-ends:
				return e, "order"
			case s := <-m.signals:
				if e, ok := m.powerSignal(s); ok {
					return e, s.by
				}
			}
		}

		sessCtx, stop := context.WithCancel(agentCtx)
		done := make(chan struct{})

		go func() {
			defer close(done)

			if err := session.Run(sessCtx, opts); err != nil {
				m.emit(Event{Event: "session-closed", Boot: boot, Error: err.Error()})
			}
		}()

		e, by, cut := m.agentRunning(ctx, ends)

		stop()
		<-done

		if !cut {
			return e, by
		}
	}
}

// agentRunning waits while the session runs for what ends it: an ending (the agent is
// gone) or a network cut (true: the agent stays, its session does not).
func (m *machine) agentRunning(ctx context.Context, ends <-chan ending) (ending, string, bool) {
	for {
		select {
		case <-ctx.Done():
			return endOff, "", false
		case e := <-ends:
			return e, "order", false
		case s := <-m.signals:
			if e, ok := m.powerSignal(s); ok {
				return e, s.by, false
			}

			if m.isCut() {
				return 0, "", true
			}
		}
	}
}

// watchResults reports each order's outcome once it is final, while the agent runs.
func (m *machine) watchResults(ctx context.Context, exec *orders.Executor, boot int, kinds *orderKinds) {
	final := map[string]agentv1.OrderResult_Status{}

	for {
		changed := exec.Changed()

		for _, r := range exec.Results() {
			st := r.GetStatus()
			if (st != agentv1.OrderResult_STATUS_DONE && st != agentv1.OrderResult_STATUS_FAILED) || final[r.GetOrderId()] == st {
				continue
			}

			if ctx.Err() != nil {
				return // the machine is gone: nothing it did after is said
			}

			final[r.GetOrderId()] = st
			ev := Event{
				Event: "order-done", Boot: boot, Order: r.GetOrderId(), Kind: kinds.get(r.GetOrderId()),
				Status:  map[agentv1.OrderResult_Status]string{agentv1.OrderResult_STATUS_DONE: "done", agentv1.OrderResult_STATUS_FAILED: "failed"}[st],
				Message: r.GetMessage(),
			}

			if w := r.GetWipe(); w != nil {
				ev.Wipe, ev.Disks = w.GetGenerationId(), len(w.GetDisks())
			}

			m.emit(ev)
		}

		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

type orderKinds struct {
	mu    sync.Mutex
	kinds map[string]string
}

func (k *orderKinds) set(id, kind string) {
	k.mu.Lock()
	k.kinds[id] = kind
	k.mu.Unlock()
}

func (k *orderKinds) get(id string) string {
	k.mu.Lock()
	defer k.mu.Unlock()

	return k.kinds[id]
}

func orderEvent(name string, boot int, o *agentv1.Order) Event {
	ev := Event{Event: name, Boot: boot, Order: o.GetId(), Kind: agentv1.OrderKind(o)}

	if w := o.GetWipe(); w != nil {
		ev.Wipe = w.GetGenerationId()
		ev.Mode = strings.ToLower(strings.TrimPrefix(w.GetMode().String(), "MODE_"))
	}

	return ev
}

// newBootID is a fresh boot ID, as the kernel makes one at every boot.
func newBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails

	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80

	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
