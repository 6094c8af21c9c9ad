package httpbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
)

// The provider's resource namespace and type of Machine (provider/internal/resources).
const (
	stateNamespace = "metal"
	machineType    = "Machines.anvil.dev"
)

// Control is a connection to the provider's control socket.
type Control struct {
	conn        *grpc.ClientConn
	transitions controlv1.TransitionServiceClient
	state       v1alpha1.StateClient
}

// Dial connects to the control socket at path.
func Dial(path string) (*Control, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("error resolving %s: %w", path, err)
	}

	conn, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("error connecting to %s: %w", path, err)
	}

	return &Control{
		conn:        conn,
		transitions: controlv1.NewTransitionServiceClient(conn),
		state:       v1alpha1.NewStateClient(conn),
	}, nil
}

// Close closes the connection.
func (c *Control) Close() error { return c.conn.Close() }

// Transitions is the control API's transition service.
func (c *Control) Transitions() controlv1.TransitionServiceClient { return c.transitions }

// MachineIDs lists the machines in the provider's state.
func (c *Control) MachineIDs(ctx context.Context) (map[string]struct{}, error) {
	ids := map[string]struct{}{}

	err := c.List(ctx, machineType, func(id, _ string) error {
		ids[id] = struct{}{}

		return nil
	})
	if err != nil {
		return nil, err
	}

	return ids, nil
}

// List calls each with the ID and YAML spec of every resource of the type in the
// provider's namespace (provider/internal/resources).
func (c *Control) List(ctx context.Context, typ string, each func(id, spec string) error) error {
	stream, err := c.state.List(ctx, &v1alpha1.ListRequest{Namespace: stateNamespace, Type: typ})
	if err != nil {
		return fmt.Errorf("error listing %s: %w", typ, err)
	}

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}

		if err != nil {
			return fmt.Errorf("error listing %s: %w", typ, err)
		}

		r := msg.GetResource()
		if err = each(r.GetMetadata().GetId(), r.GetSpec().GetYamlSpec()); err != nil {
			return fmt.Errorf("error reading %s %s: %w", typ, r.GetMetadata().GetId(), err)
		}
	}
}

// SeedStats says how seeding went.
type SeedStats struct {
	Machines     int           `json:"machines"`
	Discover     time.Duration `json:"discover"`    // boot-script requests until all machines were recorded
	Transitions  time.Duration `json:"transitions"` // accept/allocate/installed
	Rerequested  int           `json:"rerequested"` // boot-script requests sent again for machines not recorded
	Transitioned int64         `json:"transitioned"`
	At           time.Time     `json:"at"`
}

// Seed makes n machines known to the provider by requesting each one's boot script,
// waits until all are recorded, then accepts, allocates and marks installed per KindOf,
// with inflight requests at a time.
func Seed(ctx context.Context, baseURL string, ctl *Control, n, inflight int) (*SeedStats, error) {
	st := &SeedStats{Machines: n, At: time.Now().UTC()}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: inflight}}

	defer client.CloseIdleConnections()

	start := time.Now()

	all := make([]int, n)
	for i := range all {
		all[i] = i
	}

	if err := parallel(ctx, all, inflight, func(i int) error { return fetch(ctx, client, baseURL+Path(i)) }); err != nil {
		return nil, err
	}

	// Machines are recorded asynchronously, and an observation the controller cannot take
	// at once is dropped: ask again for machines still missing once progress stalls.
	deadline := time.Now().Add(3 * time.Minute)
	last, lastChange := -1, time.Now()

	for {
		ids, err := ctl.MachineIDs(ctx)
		if err != nil {
			return nil, err
		}

		if len(ids) >= n {
			break
		}

		if len(ids) != last {
			last, lastChange = len(ids), time.Now()
		} else if time.Since(lastChange) > 3*time.Second {
			var missing []int

			for i := range n {
				if _, ok := ids[UUID(i)]; !ok {
					missing = append(missing, i)
				}
			}

			st.Rerequested += len(missing)

			if err := parallel(ctx, missing, inflight, func(i int) error { return fetch(ctx, client, baseURL+Path(i)) }); err != nil {
				return nil, err
			}

			lastChange = time.Now()
		}

		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d machines recorded after %s", len(ids), n, time.Since(start).Round(time.Second))
		}

		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("interrupted: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}

	st.Discover = time.Since(start)
	start = time.Now()

	var calls atomic.Int64

	err := parallel(ctx, all, inflight, func(i int) error {
		id := UUID(i)

		if _, err := ctl.transitions.Accept(ctx, &controlv1.AcceptRequest{MachineId: id, SkipInitialWipe: true}); err != nil {
			return fmt.Errorf("error accepting %s: %w", id, err)
		}

		calls.Add(1)

		if KindOf(i) == KindAgent {
			return nil
		}

		if _, err := ctl.transitions.Allocate(ctx, &controlv1.AllocateRequest{MachineId: id, TalosVersion: "v1.9.0"}); err != nil {
			return fmt.Errorf("error allocating %s: %w", id, err)
		}

		calls.Add(1)

		if KindOf(i) == KindTalos {
			return nil
		}

		if _, err := ctl.transitions.MarkInstalled(ctx, &controlv1.MarkInstalledRequest{MachineId: id}); err != nil {
			return fmt.Errorf("error marking %s installed: %w", id, err)
		}

		calls.Add(1)

		return nil
	})
	if err != nil {
		return nil, err
	}

	st.Transitions = time.Since(start)
	st.Transitioned = calls.Load()

	return st, nil
}

// parallel runs fn over items with at most inflight at a time; the first error stops it.
func parallel(ctx context.Context, items []int, inflight int, fn func(int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	work := make(chan int)

	var wg sync.WaitGroup

	for range inflight {
		wg.Go(func() {
			for i := range work {
				if err := fn(i); err != nil {
					cancel(err)
				}
			}
		})
	}

loop:
	for _, i := range items {
		select {
		case <-ctx.Done():
			break loop
		case work <- i:
		}
	}

	close(work)
	wg.Wait()

	if err := context.Cause(ctx); err != nil {
		return err
	}

	return nil
}

// fetch GETs url and checks it answers 200.
func fetch(ctx context.Context, client *http.Client, url string) error {
	_, err := get(ctx, client, url)

	return err
}

func get(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", fmt.Errorf("error building the request: %w", err)
	}

	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("error requesting %s: %w", url, err)
	}
	defer resp.Body.Close()

	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("error reading %s: %w", url, err)
	}

	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s answered %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}

	return string(body), nil
}

// ScriptSizes fetches one script of each kind, checks each is the script its kind
// should get, and returns their sizes.
func ScriptSizes(ctx context.Context, baseURL string) (map[Kind]int, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	want := map[Kind]string{KindDisk: "booting from disk", KindTalos: " talos.config=", KindAgent: "anvil.token="}
	sizes := map[Kind]int{}

	for i := range 5 {
		k := KindOf(i)
		if _, done := sizes[k]; done {
			continue
		}

		body, err := get(ctx, client, baseURL+Path(i))
		if err != nil {
			return nil, err
		}

		if !strings.Contains(body, want[k]) {
			return nil, fmt.Errorf("machine %s (%s) got an unexpected script:\n%s", UUID(i), k, body)
		}

		sizes[k] = len(body)
	}

	return sizes, nil
}
