package fleetsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/powerwire"
)

// Config configures a fleet (the flags of agent/cmd/fleetsim; see the package doc).
type Config struct {
	ProviderURL     string
	Machines, First int
	Seed            int64
	BootConcurrency int
	BootRetry       time.Duration
	RebootDelay     time.Duration
	WipeFast        time.Duration
	WipeZeroes      time.Duration
	WipeSecure      time.Duration
	KexecLoad       time.Duration
	Kexec           bool
	// TalosChain fetches the kernel a Talos boot script boots (the Image Factory's, without
	// the provider's cache), as iPXE does; a failure is a failed boot, retried.
	TalosChain   bool
	BMCAddress   string
	BMCPort      uint32
	AgentVersion string
	SMBIOSDir    string
	// Events receives the JSON lines.
	Events io.Writer
	// Logger is the agents' own log.
	Logger *zap.Logger
}

// Fleet is the simulated machines.
type Fleet struct {
	cfg       Config
	events    *events
	machines  []*machine
	byID      map[string]*machine
	client    *http.Client
	bootSlots chan struct{}
}

// New builds the fleet: identities, and each machine's inventory, encoded once.
func New(cfg Config) (*Fleet, error) {
	if cfg.ProviderURL == "" {
		return nil, errors.New("no provider URL")
	}

	if cfg.Machines <= 0 || cfg.BootConcurrency <= 0 {
		return nil, fmt.Errorf("need machines and boot concurrency above 0 (got %d, %d)", cfg.Machines, cfg.BootConcurrency)
	}

	profiles, err := LoadProfiles(cfg.SMBIOSDir)
	if err != nil {
		return nil, err
	}

	f := &Fleet{
		cfg: cfg, events: newEvents(cfg.Events), byID: map[string]*machine{},
		bootSlots: make(chan struct{}, cfg.BootConcurrency),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			MaxIdleConns: cfg.BootConcurrency, MaxIdleConnsPerHost: cfg.BootConcurrency, IdleConnTimeout: 30 * time.Second,
		}},
	}

	for i := cfg.First; i < cfg.First+cfg.Machines; i++ {
		id := identityOf(cfg.Seed, i)

		m := &machine{fleet: f, id: id, signals: make(chan signal, 8), state: stateOff, logger: cfg.Logger.With(zap.String("machine", id.UUID))}
		for _, mac := range id.MACs {
			m.macs = append(m.macs, mac.String())
		}

		if m.inventory, err = encodeInventory(id, profiles[id.Profile%len(profiles)]); err != nil {
			return nil, err
		}

		f.machines = append(f.machines, m)
		f.byID[id.UUID] = m
	}

	return f, nil
}

// Run announces the listener and the machines, powers every machine on and runs them
// until ctx is done; then it writes the summary. l serves the power API and status.
func (f *Fleet) Run(ctx context.Context, l net.Listener) error {
	evCtx, stopEvents := context.WithCancel(context.WithoutCancel(ctx))

	var evDone sync.WaitGroup

	evDone.Go(func() { f.events.run(evCtx) })

	defer func() {
		stopEvents()
		evDone.Wait()
	}()

	srv := &http.Server{Handler: f.Handler(), ReadHeaderTimeout: 10 * time.Second}

	var wg sync.WaitGroup

	wg.Go(func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.cfg.Logger.Error("the power API stopped", zap.Error(err))
		}
	})

	f.events.emit(Event{Event: "listening", Address: l.Addr().String()})

	for _, m := range f.machines {
		m.emit(Event{Event: "machine", MAC: m.macs[0], Serial: m.id.Serial, NICs: len(m.macs), Disks: len(m.id.Disks)})
	}

	for _, m := range f.machines {
		wg.Go(func() { m.run(ctx) })
	}

	<-ctx.Done()

	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()

	_ = srv.Shutdown(shutCtx) // the machines are stopping: a slow client is cut

	wg.Wait()
	f.client.CloseIdleConnections()

	return nil
}

// Control carries out a stdin command (see the package doc) and acknowledges it.
func (f *Fleet) Control(line string) error {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return nil
	}

	ev := Event{Event: "control", Cmd: strings.Join(fields, " ")}

	err := f.control(fields)
	if err != nil {
		ev.Error = err.Error()
	}

	f.events.emit(ev)

	return err
}

func (f *Fleet) control(fields []string) error {
	if len(fields) != 2 {
		return fmt.Errorf("want <command> <machine>, got %q", strings.Join(fields, " "))
	}

	m, err := f.lookup(fields[1])
	if err != nil {
		return err
	}

	switch cmd := fields[0]; cmd {
	case "cut", "restore", "powercut", "reboot":
		return m.send(signal{kind: cmd, by: "control"})
	case "poweron":
		return m.send(signal{kind: "on", by: "control"})
	default:
		return fmt.Errorf("unknown command %q: want cut, restore, powercut, poweron or reboot", cmd)
	}
}

func (f *Fleet) lookup(name string) (*machine, error) {
	if idx, ok := strings.CutPrefix(name, "#"); ok {
		i, err := strconv.Atoi(idx)
		if err != nil || i < f.cfg.First || i >= f.cfg.First+len(f.machines) {
			return nil, fmt.Errorf("no machine %s", name)
		}

		return f.machines[i-f.cfg.First], nil
	}

	m, ok := f.byID[strings.ToLower(name)]
	if !ok {
		return nil, fmt.Errorf("no machine %s", name)
	}

	return m, nil
}

// Handler serves the power API (internal/powerwire) and the status endpoints.
func (f *Fleet) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /machines/{uuid}/power", f.getPower)
	mux.HandleFunc("POST /machines/{uuid}/power", f.postPower)
	mux.HandleFunc("POST /machines/{uuid}/boot", f.postBoot)
	mux.HandleFunc("GET /machines", f.getMachines)
	mux.HandleFunc("GET /status", f.getStatus)

	return mux
}

func (f *Fleet) getPower(w http.ResponseWriter, r *http.Request) {
	m, ok := f.machine(w, r)
	if !ok {
		return
	}

	state := powerwire.ActionOn
	if m.status().State == stateOff {
		state = powerwire.ActionOff
	}

	writeJSON(w, http.StatusOK, powerwire.PowerReply{State: state})
}

func (f *Fleet) postPower(w http.ResponseWriter, r *http.Request) {
	m, ok := f.machine(w, r)
	if !ok {
		return
	}

	var req powerwire.PowerRequest
	if !decode(w, r, &req) {
		return
	}

	switch req.Action {
	case powerwire.ActionOn, powerwire.ActionOff, powerwire.ActionCycle:
	default:
		writeJSON(w, http.StatusBadRequest, powerwire.ErrorReply{Error: fmt.Sprintf("unknown action %q", req.Action)})

		return
	}

	if req.Action == powerwire.ActionOn && m.status().State != stateOff {
		w.WriteHeader(http.StatusNoContent) // on already

		return
	}

	if req.Action == powerwire.ActionOff && m.status().State == stateOff {
		w.WriteHeader(http.StatusNoContent)

		return
	}

	if err := m.send(signal{kind: req.Action, by: "power-api"}); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, powerwire.ErrorReply{Error: err.Error()})

		return
	}

	w.WriteHeader(http.StatusNoContent)
}

// postBoot accepts a boot device override: a simulated machine always PXE-boots first.
func (f *Fleet) postBoot(w http.ResponseWriter, r *http.Request) {
	if _, ok := f.machine(w, r); !ok {
		return
	}

	var req powerwire.BootRequest
	if !decode(w, r, &req) {
		return
	}

	w.WriteHeader(http.StatusNoContent)
}

func (f *Fleet) getMachines(w http.ResponseWriter, _ *http.Request) {
	out := make([]Status, 0, len(f.machines))
	for _, m := range f.machines {
		out = append(out, m.status())
	}

	writeJSON(w, http.StatusOK, out)
}

// FleetStatus is what GET /status answers.
type FleetStatus struct {
	Machines int            `json:"machines"`
	On       int            `json:"on"`
	Sessions int            `json:"sessions"`
	States   map[string]int `json:"states"`
}

func (f *Fleet) getStatus(w http.ResponseWriter, _ *http.Request) {
	st := FleetStatus{Machines: len(f.machines), States: map[string]int{}}

	for _, m := range f.machines {
		s := m.status()
		st.States[s.State]++

		if s.State != stateOff {
			st.On++
		}

		if s.Connected {
			st.Sessions++
		}
	}

	writeJSON(w, http.StatusOK, st)
}

func (f *Fleet) machine(w http.ResponseWriter, r *http.Request) (*machine, bool) {
	m, ok := f.byID[strings.ToLower(r.PathValue("uuid"))]
	if !ok {
		writeJSON(w, http.StatusNotFound, powerwire.ErrorReply{Error: fmt.Sprintf("no machine %q", r.PathValue("uuid"))})
	}

	return m, ok
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, powerwire.ErrorReply{Error: "malformed request: " + err.Error()})

		return false
	}

	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "error encoding the answer", http.StatusInternalServerError)

		return
	}

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n')) // the client may be gone: nothing to do about it
}
