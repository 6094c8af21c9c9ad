package power

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Operations, as the BMC call metrics label them.
const (
	OpDial        = "dial"
	OpPowerStatus = "power-status"
	OpPowerOn     = "power-on"
	OpPowerOff    = "power-off"
	OpCycle       = "cycle"
	OpPXEOnce     = "pxe-once"
	OpClose       = "close"
)

var operations = []string{OpDial, OpPowerStatus, OpPowerOn, OpPowerOff, OpCycle, OpPXEOnce, OpClose}

// Metrics time every BMC call and count the failed ones, by backend and operation.
type Metrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (none when nil). The
// children of the backends that speak to BMCs exist from the start, at 0.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "anvil_bmc_call_duration_seconds",
			Help: "Time BMC calls took, failed or not, by backend (ipmi, redfish, api) and operation.",
			// A LAN BMC answers in milliseconds; a struggling one runs into the call timeout.
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"backend", "operation"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_bmc_call_errors_total",
			Help: "BMC calls that failed (unreachable, refused, timed out…; not an operation the BMC says it does not offer), by backend and operation.",
		}, []string{"backend", "operation"}),
	}

	for _, b := range []Backend{BackendIPMI, BackendRedfish, BackendAPI} {
		for _, op := range operations {
			m.duration.WithLabelValues(string(b), op)
			m.errors.WithLabelValues(string(b), op)
		}
	}

	if reg != nil {
		reg.MustRegister(m.duration, m.errors)
	}

	return m
}

// Instrument returns dial, its calls and those of the clients it opens timed and
// counted under backend. Wrapping each backend's own dialer (not a Dialers entry that
// picks one, as RedfishFirst does) labels each call with the protocol it really spoke.
// A nil *Metrics returns dial as it is.
func (m *Metrics) Instrument(backend Backend, dial Dialer) Dialer {
	if m == nil {
		return dial
	}

	ops := make(map[string]*opMetrics, len(operations))
	for _, op := range operations {
		ops[op] = &opMetrics{duration: m.duration.WithLabelValues(string(backend), op), errors: m.errors.WithLabelValues(string(backend), op)}
	}

	return func(ctx context.Context, ep Endpoint) (Client, error) {
		var c Client

		err := ops[OpDial].call(func() error {
			var err error
			c, err = dial(ctx, ep)

			return err
		})
		if err != nil {
			return nil, err
		}

		return &instrumented{c: c, ops: ops}, nil
	}
}

// opMetrics are one operation's children, resolved once per backend.
type opMetrics struct {
	duration prometheus.Observer
	errors   prometheus.Counter
}

func (o *opMetrics) call(f func() error) error {
	start := time.Now()
	err := f()

	o.duration.Observe(time.Since(start).Seconds())

	// Not offering an operation is an answer, and the provider stopping no BMC's fault.
	if err != nil && !errors.Is(err, ErrUnsupported) && !errors.Is(err, context.Canceled) {
		o.errors.Inc()
	}

	return err
}

// instrumented is a Client whose calls are timed and counted.
type instrumented struct {
	c   Client
	ops map[string]*opMetrics
}

func (i *instrumented) PowerState(ctx context.Context) (bool, error) {
	var on bool

	err := i.ops[OpPowerStatus].call(func() error {
		var err error
		on, err = i.c.PowerState(ctx)

		return err
	})

	return on, err
}

func (i *instrumented) PowerOn(ctx context.Context) error {
	return i.ops[OpPowerOn].call(func() error { return i.c.PowerOn(ctx) })
}

func (i *instrumented) PowerOff(ctx context.Context) error {
	return i.ops[OpPowerOff].call(func() error { return i.c.PowerOff(ctx) })
}

func (i *instrumented) PowerCycle(ctx context.Context) error {
	return i.ops[OpCycle].call(func() error { return i.c.PowerCycle(ctx) })
}

func (i *instrumented) SetPXEOnce(ctx context.Context, mode BootMode) error {
	return i.ops[OpPXEOnce].call(func() error { return i.c.SetPXEOnce(ctx, mode) })
}

func (i *instrumented) Close() error {
	return i.ops[OpClose].call(i.c.Close)
}
