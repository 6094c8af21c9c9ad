package agentapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/agentapi"
	"github.com/anvil-metal/anvil/provider/internal/untrusted"
)

// maxRefusalLine bounds a refusal's log line: its message, the bounded machine ID and
// the remote address, with room to spare.
const maxRefusalLine = 512

// TestRefusedHelloLogBounded: a hello refused for a 1 MiB machine ID leaves a log line
// of a few hundred bytes, not the megabyte a client chose.
func TestRefusedHelloLogBounded(t *testing.T) {
	t.Parallel()

	core, logs := observer.New(zap.InfoLevel)
	f := newFixtureWith(t, func(o *agentapi.Options) { o.Logger = zap.New(core) })

	huge := strings.Repeat("4c4c4544-", (1<<20)/9+1)
	tok := token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: time.Now()})

	stream, err := f.client.Session(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{
		MachineId: huge, Token: tok, Macs: []string{strings.Repeat("52:54:00:", 1<<16)},
	}}}))

	_, err = stream.Recv()
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	refusals := logs.FilterMessage("agent refused: invalid token").All()
	require.Len(t, refusals, 1)

	line, err := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()).EncodeEntry(refusals[0].Entry, refusals[0].Context)
	require.NoError(t, err)
	assert.Less(t, line.Len(), maxRefusalLine, "the refusal's log line: %.200s", line.String())
	assert.Equal(t, untrusted.Bounded(huge), refusals[0].ContextMap()["machine"])
	assert.Contains(t, refusals[0].ContextMap()["machine"], "…(1048581 bytes)")
	assert.NotContains(t, line.String(), tok, "no token in the log")
}
