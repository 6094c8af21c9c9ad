package session

import (
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
)

// endedStream is a session stream the provider has ended: Recv hands out what was
// already received, then the stream's status.
type endedStream struct {
	agentv1.AgentService_SessionClient

	pending []*agentv1.ProviderMessage
	status  error
}

func (s *endedStream) Recv() (*agentv1.ProviderMessage, error) {
	if len(s.pending) > 0 {
		m := s.pending[0]
		s.pending = s.pending[1:]

		return m, nil
	}

	return nil, s.status
}

// TestEndedBy: a Send that failed with io.EOF (the provider ended the stream) reports the
// provider's status, which the agent acts on (a superseded boot's token is an error, not a
// warning); other errors stay as they are.
func TestEndedBy(t *testing.T) {
	t.Parallel()

	refused := status.Error(codes.Unauthenticated, "invalid token")
	broken := errors.New("connection reset")

	for _, tc := range []struct {
		name    string
		sendErr error
		stream  *endedStream
		want    codes.Code
		wantErr error
	}{
		{name: "refused at once", sendErr: io.EOF, stream: &endedStream{status: refused}, want: codes.Unauthenticated},
		{
			name: "a message before the refusal", sendErr: io.EOF, want: codes.ResourceExhausted,
			stream: &endedStream{
				pending: []*agentv1.ProviderMessage{{}},
				status:  status.Error(codes.ResourceExhausted, "too many sessions without a valid hello"),
			},
		},
		{name: "not ended by the provider", sendErr: broken, stream: &endedStream{status: refused}, wantErr: broken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			err := endedBy(tc.sendErr, func() error { return drained(tc.stream) })
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)

				return
			}

			assert.Equal(t, tc.want, status.Code(err), "%v", err)
		})
	}
}
