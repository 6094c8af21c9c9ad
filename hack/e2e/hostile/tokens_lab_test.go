//go:build lab

package hostile

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/siderolink/api/events"
	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/internal/token"
)

// parallel runs f(i) for i in [0, n) on workers goroutines and waits for them.
func parallel(ctx context.Context, n, workers int, f func(i int)) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)

	for range workers {
		wg.Add(1)

		go func() {
			defer wg.Done()

			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}

				f(i)
			}
		}()
	}

	wg.Wait()
}

// forgeries are tokens an attacker can make for machineID without the provider's key:
// garbage, oversize, a real format signed with a key of its own, the wrong kind.
func forgeries(machineID string, i int) string {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand does not fail

	switch i % 6 {
	case 0:
		return ""
	case 1:
		return strings.Repeat("A", 4096)
	case 2:
		return fmt.Sprintf("v1.%d.%d", i, i)
	case 3:
		return token.Sign(key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: time.Now().Add(time.Hour)})
	case 4:
		return token.Sign(key, token.Claims{Kind: token.KindMetadata, MachineID: machineID, Binding: "alloc"})
	default:
		return "v2.AAAA.BBBB"
	}
}

// tally counts answers by what they were; unexpected ones are reported once each.
type tally struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *tally) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if c.counts == nil {
		c.counts = map[string]int{}
	}

	c.counts[what]++
}

// refusals are how the agent API refuses a session without a valid hello: as invalid
// (Unauthenticated) or, past its bound on such sessions on one connection, with the
// connection itself (ResourceExhausted, then Unavailable).
var refusals = map[string]bool{
	codes.Unauthenticated.String(): true, codes.ResourceExhausted.String(): true, codes.Unavailable.String(): true,
}

// assertAllRefused checks that each of the n attempts tallied was refused, none welcomed
// and none lost.
func assertAllRefused(t *testing.T, c *tally, n int, what string) {
	t.Helper()

	c.mu.Lock()
	defer c.mu.Unlock()

	total := 0

	for code, count := range c.counts {
		total += count

		assert.True(t, refusals[code], "%s are refused: %d ended with %s", what, count, code)
	}

	assert.Equal(t, n, total, "%s: every attempt is accounted for", what)
}

func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()

	return fmt.Sprint(c.counts)
}

// attackTokens sends n invalid credentials to each place one is checked: the boot script
// (malformed queries), the metadata server, the agent's Hello and Talos' event sink.
func attackTokens(ctx context.Context, t *testing.T, a attacker, machineID string, n int) {
	c := a.httpClient()
	defer c.CloseIdleConnections()

	var boot, meta tally

	parallel(ctx, n, 4, func(i int) {
		queries := []string{
			"uuid=" + strings.Repeat("f", 400) + "&mac=52:54:00:00:00:01&arch=x86_64&platform=pcbios",
			"uuid=" + machineID + "&mac=zz&arch=x86_64&platform=pcbios",
			"uuid=" + machineID + "&mac=52:54:00:00:00:01&arch=x86_64&platform=pcbios&" + strings.Repeat("x", 600),
			"uuid=not-a-uuid&mac=52:54:00:00:00:01&arch=x86_64&platform=pcbios",
			"uuid=" + machineID + "&mac=52:54:00:00:00:01&arch=sparc&platform=pcbios",
			"%zz",
		}

		status, _, err := a.get(ctx, c, "/ipxe/boot.ipxe?"+queries[i%len(queries)])
		if err != nil {
			boot.add("error")
		} else {
			boot.add(fmt.Sprint(status))
		}

		id := machineID
		if i%2 == 1 {
			id = fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		}

		status, _, err = a.get(ctx, c, "/metadata/"+id+"?token="+url.QueryEscape(forgeries(id, i)))
		if err != nil {
			meta.add("error")
		} else {
			meta.add(fmt.Sprint(status))
		}
	})

	assert.Equal(t, map[string]int{"400": n}, boot.counts, "malformed boot-script queries are refused")
	assert.Equal(t, map[string]int{"403": n}, meta.counts, "metadata requests with invalid tokens are refused")
	t.Logf("tokens: boot script %s, metadata %s", &boot, &meta)

	agentConn, err := a.agentConn()
	if !assert.NoError(t, err) {
		return
	}

	defer agentConn.Close()

	var hellos tally

	parallel(ctx, n, 8, func(i int) {
		id := machineID
		if i%3 == 2 {
			id = fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		}

		hellos.add(status.Code(hello(ctx, agentConn, id, forgeries(id, i))).String())
	})

	assertAllRefused(t, &hellos, n, "agent hellos with invalid tokens")
	t.Logf("tokens: agent hello %s", &hellos)

	sinkConn, err := a.plainGRPC()
	if !assert.NoError(t, err) {
		return
	}

	defer sinkConn.Close()

	sink := events.NewEventSinkServiceClient(sinkConn)

	install, err := labtest.InstallRebooted()
	if !assert.NoError(t, err) {
		return
	}

	var published tally

	parallel(ctx, n/5, 4, func(int) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()

		_, err := sink.Publish(cctx, install)
		published.add(status.Code(err).String())
	})

	assert.Equal(t, map[string]int{codes.PermissionDenied.String(): n / 5}, published.counts, "install events from a host that booted no Talos are refused")
	t.Logf("tokens: event sink %s", &published)
}

// hello opens an agent session with the token and returns how the provider ended it:
// nil when it welcomed the "agent".
func hello(ctx context.Context, conn *grpc.ClientConn, machineID, tok string) error {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()

	stream, err := agentv1.NewAgentServiceClient(conn).Session(cctx)
	if err != nil {
		return err
	}

	// A Send that finds the stream ended (io.EOF: the provider refused the session before
	// the hello went) leaves the reason to Recv, read next as for any hello.
	err = stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{
		MachineId: machineID, Token: tok, BootId: "rogue", AgentVersion: "rogue",
	}}})
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}

	msg, err := stream.Recv()
	if err != nil {
		return err
	}

	if msg.GetWelcome() == nil {
		return status.Error(codes.Unknown, "the first answer is no welcome")
	}

	return nil
}

// refusedAs checks err is the provider's refusal with code and a message containing
// want.
func refusedAs(t *testing.T, err error, code codes.Code, want, what string) {
	t.Helper()

	if assert.Error(t, err, "%s is refused", what) {
		assert.Equal(t, code, status.Code(err), "%s: %v", what, err)
		assert.Contains(t, status.Convert(err).Message(), want, what)
	}
}
