package labtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/omnilab"
)

// Omni reads and writes the lab Omni's resources with omnictl, as the lab's admin.
type Omni struct{ Client *omnilab.Client }

// OmniResource is a resource as omnictl prints it (-o json).
type OmniResource struct {
	Metadata struct {
		ID     string         `json:"id"`
		Labels map[string]any `json:"labels"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

// Get reads one resource.
func (o *Omni) Get(ctx context.Context, typ, ns, id string) (OmniResource, error) {
	var r OmniResource

	out, err := o.Client.Run(ctx, "get", typ, id, "--namespace", ns, "-o", "json")
	if err != nil {
		return r, err
	}

	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return r, fmt.Errorf("error decoding %s %s: %w: %s", typ, id, err, out)
	}

	return r, nil
}

// Spec reads one resource's spec into spec.
func (o *Omni) Spec(ctx context.Context, typ, ns, id string, spec any) error {
	r, err := o.Get(ctx, typ, ns, id)
	if err != nil {
		return err
	}

	if err := json.Unmarshal(r.Spec, spec); err != nil {
		return fmt.Errorf("error decoding the spec of %s %s: %w", typ, id, err)
	}

	return nil
}

// Apply applies a resource document.
func (o *Omni) Apply(ctx context.Context, doc string) error {
	f, err := os.CreateTemp("", "omni-*.yaml")
	if err != nil {
		return err
	}

	defer os.Remove(f.Name())

	if _, err := io.WriteString(f, doc); err != nil {
		f.Close()

		return err
	}

	if err := f.Close(); err != nil {
		return err
	}

	out, err := o.Client.Run(ctx, "apply", "-f", f.Name())
	if err != nil {
		return fmt.Errorf("omnictl apply: %w: %s", err, out)
	}

	return nil
}

// Acceptance statuses of InfraMachineConfig, as omnictl prints them.
const (
	AcceptancePending  = 0
	AcceptanceAccepted = 1
	AcceptanceRejected = 2
)

// SetConfig applies the machine's InfraMachineConfig as an admin does: its acceptance,
// and extra spec lines (YAML, two-space indented after the first).
func (o *Omni) SetConfig(ctx context.Context, id string, acceptance int, extra string) error {
	doc := fmt.Sprintf("metadata:\n  namespace: default\n  type: InfraMachineConfigs.omni.sidero.dev\n  id: %s\nspec:\n  acceptancestatus: %d\n", id, acceptance)
	if extra != "" {
		doc += "  " + extra + "\n"
	}

	return o.Apply(ctx, doc)
}

// Accept accepts the machine as an admin does (the UI's "Accept").
func (o *Omni) Accept(ctx context.Context, id string) error {
	return o.SetConfig(ctx, id, AcceptanceAccepted, "")
}

// stepCleanupRoom is what Eventually leaves of the test binary's -timeout for the
// cleanups after a step that failed.
const stepCleanupRoom = 3 * time.Minute

// Eventually retries f every 2 s until it returns nil or deadline passes; then it
// reports f's last error as what failed, and returns false. It never stops the test, so
// that the machines' goroutines may call it.
//
// A step ends before the test binary's -timeout, with stepCleanupRoom to spare: a stuck
// step then fails as itself, and the cleanups print the machines' and provider's logs
// and take the lab down, which go test's timeout panic would skip.
func Eventually(t testing.TB, deadline time.Duration, what string, f func() error) bool {
	t.Helper()

	end := time.Now().Add(deadline)

	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if binary, ok := d.Deadline(); ok && binary.Add(-stepCleanupRoom).Before(end) {
			end = binary.Add(-stepCleanupRoom)
			deadline = time.Until(end).Round(time.Second)
		}
	}

	for {
		err := f()
		if err == nil {
			return true
		}

		if time.Now().After(end) || t.Context().Err() != nil {
			t.Errorf("%s: not within %s: %v", what, deadline, err)

			return false
		}

		time.Sleep(2 * time.Second)
	}
}

// ForEach runs f for each machine at once and waits for them: the machines boot
// together, and their steps share the wait.
func ForEach(ms []*machine.Machine, f func(*machine.Machine)) {
	var wg sync.WaitGroup

	for _, m := range ms {
		wg.Go(func() { f(m) })
	}

	wg.Wait()
}

// PoweredOn is when QEMU last started the machine: it writes its pid file as it does.
func PoweredOn(m *machine.Machine) (time.Time, error) {
	st, err := os.Stat(m.PIDFile())
	if err != nil {
		return time.Time{}, fmt.Errorf("the pid file: %w", err)
	}

	return st.ModTime(), nil
}

// Report gathers a lab test's figures, per machine.
type Report struct {
	mu    sync.Mutex
	lines []string
}

// Add records that what took d on m.
func (r *Report) Add(what string, m *machine.Machine, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.lines = append(r.lines, fmt.Sprintf("%-48s %-10s %-9s %6.1f s", what, m.Name, m.Firmware, d.Seconds()))
}

// Write prints the figures under title and writes them to _out/e2e/<name>.
func (r *Report) Write(t testing.TB, root, title, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()

	slices.Sort(r.lines)

	text := fmt.Sprintf("%s %s (TCG, %d CPUs)\n\n%s\n", title, time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), strings.Join(r.lines, "\n"))
	t.Log(text)

	out := filepath.Join(root, "_out", "e2e", name)
	if assert.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755)) {
		assert.NoError(t, os.WriteFile(out, []byte(text), 0o644))
	}
}
