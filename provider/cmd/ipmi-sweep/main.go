// Command ipmi-sweep reads the power state of many IPMI BMCs with power.Sweep and prints
// what it found as JSON. The benchmark (bench power) drives it, from outside the
// provider's module tree that may import power and power/ipmi.
//
// Input on stdin (JSON, so that passwords stay out of the process list):
// {"concurrency": 64, "timeout": "5s", "targets": [{"id": "...", "address": "...",
// "port": 623, "username": "...", "password": "..."}]}
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/power/ipmi"
)

type request struct {
	Concurrency int      `json:"concurrency"`
	Timeout     string   `json:"timeout"`
	Targets     []target `json:"targets"`
}

type target struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	Port     int    `json:"port"`
	Username string `json:"username"`
	Password string `json:"password"`
}

type observation struct {
	ID     string        `json:"id"`
	State  string        `json:"state"`
	Err    string        `json:"err,omitempty"`
	TookNS time.Duration `json:"took_ns"`
}

type response struct {
	TookNS       time.Duration `json:"took_ns"`
	Observations []observation `json:"observations"`
}

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "ipmi-sweep:", err)
		cancel()
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		return fmt.Errorf("error reading the request: %w", err)
	}

	var timeout time.Duration

	if req.Timeout != "" {
		var err error

		if timeout, err = time.ParseDuration(req.Timeout); err != nil {
			return fmt.Errorf("error parsing the timeout: %w", err)
		}
	}

	targets := make([]power.Target, len(req.Targets))
	for i, t := range req.Targets {
		targets[i] = power.Target{ID: t.ID, Endpoint: power.Endpoint{
			Backend: power.BackendIPMI, Address: t.Address, Port: t.Port, Username: t.Username, Password: t.Password,
		}}
	}

	start := time.Now()
	obs := power.Sweep(ctx, targets, power.Dialers{power.BackendIPMI: ipmi.Dial},
		power.SweepOptions{Concurrency: req.Concurrency, Timeout: timeout})
	res := response{TookNS: time.Since(start), Observations: make([]observation, len(obs))}

	for i, o := range obs {
		res.Observations[i] = observation{ID: o.ID, State: stateName(o), TookNS: o.Took}
		if o.Err != nil {
			res.Observations[i].Err = o.Err.Error()
		}
	}

	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return fmt.Errorf("error writing the result: %w", err)
	}

	return nil
}

// stateName is the power state as the report says it: on, off, or "" when unread.
func stateName(o power.Observation) string {
	switch {
	case o.Err != nil:
		return ""
	case o.On:
		return "on"
	default:
		return "off"
	}
}
