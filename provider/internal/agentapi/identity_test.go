package agentapi_test

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/google/go-tpm/tpm2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/internal/tpmid/softtpm"
	"github.com/anvil-metal/anvil/provider/internal/agentapi"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/tamper"
	"github.com/anvil-metal/anvil/provider/internal/tamper/tampertest"
)

// ekStore records EKs on the Machine resource as MachineController does: the first
// stays, another is refused.
type ekStore struct{ st *resources.Store }

func (e *ekStore) RecordEK(ctx context.Context, id, ek string) error {
	m, err := safe.StateGetByID[*resources.Machine](ctx, e.st, id)

	switch {
	case state.IsNotFoundError(err):
		m = resources.NewMachine(id)
		m.TypedSpec().EK = ek

		return e.st.Create(ctx, m)
	case err != nil:
		return err
	case m.TypedSpec().EK == ek:
		return nil
	case m.TypedSpec().EK != "":
		return controllers.ErrOtherEK
	}

	_, err = safe.StateUpdateWithConflicts(ctx, e.st, m.Metadata(), func(m *resources.Machine) error {
		m.TypedSpec().EK = ek

		return nil
	})

	return err
}

// holds are the machines the security events held.
type holds struct {
	mu      sync.Mutex
	reasons []string
}

func (h *holds) Hold(_ context.Context, _, reason string) error {
	h.mu.Lock()
	defer h.mu.Unlock()

	h.reasons = append(h.reasons, reason)

	return nil
}

func (h *holds) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()

	return len(h.reasons)
}

// agentTPM is how the test's agent answers its challenge.
type agentTPM struct {
	tpm *softtpm.TPM
	// answer replaces the TPM's answer; failure is sent instead of one; hangUp sends none.
	answer  []byte
	failure string
	hangUp  bool
	// secret is the last secret the TPM recovered.
	secret []byte
}

// identityFixture is a server with EKs recorded on the store and security events held.
type identityFixture struct {
	*fixture
	holds    *holds
	registry *prometheus.Registry
}

func newIdentityFixture(t *testing.T) *identityFixture {
	t.Helper()

	f := &identityFixture{holds: &holds{}, registry: prometheus.NewRegistry()}
	eks := &ekStore{}
	f.fixture = newFixtureWith(t, func(o *agentapi.Options) {
		o.EKs = eks
		o.Tamper = tamper.New(f.holds, nil, f.registry, zaptest.NewLogger(t))
	})
	eks.st = f.store

	return f
}

// events is anvil_security_events_total{kind="identity-mismatch"}.
func (f *identityFixture) events(t *testing.T) int {
	t.Helper()

	return int(tampertest.Count(t, f.registry, tamper.IdentityMismatch))
}

// setup records the machine, its EK recorded and bound, and waits for the view.
func (f *identityFixture) setup(t *testing.T, recorded, bound string) {
	t.Helper()

	m := resources.NewMachine(machineID)
	m.TypedSpec().EK = recorded
	require.NoError(t, f.store.Create(t.Context(), m))

	in := resources.NewMachineIntent(machineID)
	if bound != "" {
		in.TypedSpec().Acceptance = resources.AcceptanceAccepted
		in.TypedSpec().BoundEK = bound
	}

	require.NoError(t, f.store.Create(t.Context(), in))
	require.Eventually(t, func() bool {
		e := f.view.Get(machineID)

		return e != nil && e.Machine != nil && e.Intent != nil && e.Machine.EK == recorded && e.Intent.BoundEK == bound
	}, 5*time.Second, time.Millisecond)
}

func (f *identityFixture) recorded(t *testing.T) string {
	t.Helper()

	m, err := safe.StateGetByID[*resources.Machine](t.Context(), f.store, machineID)
	if err != nil {
		return ""
	}

	return m.TypedSpec().EK
}

// session says hello with the agent's TPM (nil: none), answers a challenge as told, and
// returns whether the provider challenged it and what ended the hello: nil for a welcome.
func (f *identityFixture) session(t *testing.T, a *agentTPM) (challenged bool, err error) {
	t.Helper()

	stream, err := f.client.Session(t.Context())
	require.NoError(t, err)

	hello := &agentv1.Hello{
		MachineId: machineID, BootId: "b1",
		Token: token.Sign(f.key, token.Claims{Kind: token.KindAgent, MachineID: machineID, Issued: time.Now()}),
	}
	if a != nil {
		hello.Tpm = a.tpm.Hello()
	}

	require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Hello{Hello: hello}}))

	msg, err := stream.Recv()
	if err != nil {
		return false, err
	}

	if ch := msg.GetChallenge(); ch != nil {
		challenged = true

		require.NotNil(t, a, "an agent without a TPM was challenged")

		if a.hangUp {
			require.NoError(t, stream.CloseSend())
		} else {
			activation := &agentv1.Activation{Failure: a.failure}

			if a.failure == "" {
				secret, err := a.tpm.Activate(t.Context(), ch)
				if err != nil {
					activation.Failure = err.Error()
				}

				a.secret = secret
				activation.Secret = secret

				if a.answer != nil {
					activation.Secret = a.answer
				}
			}

			require.NoError(t, stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Activation{Activation: activation}}))
		}

		if msg, err = stream.Recv(); err != nil {
			return challenged, err
		}
	}

	require.NotNil(t, msg.GetWelcome(), "%v", msg)

	return challenged, nil
}

// TestSessionIdentity: the identity rules, each on a fresh provider. A machine must
// prove the EK bound at its acceptance, else the one recorded at its first registration
// with a TPM; a machine with neither may show any TPM (recorded once proven) or none.
// Every failure is refused with one fixed message and raises a security event.
func TestSessionIdentity(t *testing.T) {
	t.Parallel()

	machineTPM, otherTPM := softtpm.MustNew(), softtpm.MustNew()

	unrestricted := softtpm.MustNew()
	unrestricted.SetAKAttributes(func(a *tpm2.TPMAObject) { a.Restricted = false })

	// A thief: shows the machine's EK with an AK of its own TPM, which cannot open the
	// credential.
	thief := softtpm.MustNew()
	thiefShowing := *machineTPM
	thiefShowing.AKOverride = thief.AKPublic()

	garbage := make([]byte, 32)
	_, _ = rand.Read(garbage)

	for _, tc := range []struct {
		name            string
		recorded, bound string
		agent           *agentTPM
		challenged      bool
		refused         bool
		// wantRecorded is the EK recorded after the session.
		wantRecorded string
		// detail is in the event's words (the machine's hold reason).
		detail string
	}{
		{name: "no TPM, none expected: identity none", agent: nil},
		{name: "a TPM, none expected: proven and recorded", agent: &agentTPM{tpm: machineTPM}, challenged: true, wantRecorded: machineTPM.Fingerprint()},
		{name: "the recorded TPM", recorded: machineTPM.Fingerprint(), agent: &agentTPM{tpm: machineTPM}, challenged: true, wantRecorded: machineTPM.Fingerprint()},
		{
			name: "another TPM than the recorded one", recorded: machineTPM.Fingerprint(), agent: &agentTPM{tpm: otherTPM}, refused: true, wantRecorded: machineTPM.Fingerprint(),
			detail: "showed TPM EK " + otherTPM.Fingerprint() + ", where EK " + machineTPM.Fingerprint() + " is recorded",
		},
		{name: "no TPM where one is recorded", recorded: machineTPM.Fingerprint(), agent: nil, refused: true, wantRecorded: machineTPM.Fingerprint()},
		{name: "the bound TPM, pre-registered: recorded once proven", bound: machineTPM.Fingerprint(), agent: &agentTPM{tpm: machineTPM}, challenged: true, wantRecorded: machineTPM.Fingerprint()},
		{name: "another TPM than the bound one", bound: machineTPM.Fingerprint(), agent: &agentTPM{tpm: otherTPM}, refused: true},
		{name: "no TPM where one is bound", bound: machineTPM.Fingerprint(), agent: nil, refused: true},
		{name: "the bound TPM wins over another recorded", recorded: otherTPM.Fingerprint(), bound: machineTPM.Fingerprint(), agent: &agentTPM{tpm: machineTPM}, challenged: true, wantRecorded: otherTPM.Fingerprint()},
		{name: "a wrong answer", recorded: machineTPM.Fingerprint(), agent: &agentTPM{tpm: machineTPM, answer: garbage}, challenged: true, refused: true, wantRecorded: machineTPM.Fingerprint()},
		{name: "a wrong answer, none expected: nothing recorded", agent: &agentTPM{tpm: machineTPM, answer: garbage}, challenged: true, refused: true},
		{name: "the TPM could not answer", bound: machineTPM.Fingerprint(), agent: &agentTPM{tpm: machineTPM, failure: "TPM_RC_FAILURE"}, challenged: true, refused: true, detail: `could not answer the challenge for EK ` + machineTPM.Fingerprint() + `: "TPM_RC_FAILURE"`},
		{name: "no answer", bound: machineTPM.Fingerprint(), agent: &agentTPM{tpm: machineTPM, hangUp: true}, challenged: true, refused: true},
		{name: "the machine's EK shown by another TPM", recorded: machineTPM.Fingerprint(), agent: &agentTPM{tpm: &thiefShowing}, challenged: true, refused: true, wantRecorded: machineTPM.Fingerprint()},
		{name: "an AK the TPM does not keep to itself", agent: &agentTPM{tpm: unrestricted}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			f := newIdentityFixture(t)
			f.setup(t, tc.recorded, tc.bound)

			challenged, err := f.session(t, tc.agent)
			assert.Equal(t, tc.challenged, challenged, "challenged")

			if tc.refused {
				require.Error(t, err)
				assert.Equal(t, codes.Unauthenticated, status.Code(err))
				assert.Equal(t, "TPM identity not proven", status.Convert(err).Message(), "one fixed message")
				require.Eventually(t, func() bool { return f.events(t) == 1 && f.holds.count() == 1 }, 5*time.Second, time.Millisecond,
					"a security event that holds the machine")

				if tc.detail != "" {
					f.holds.mu.Lock()
					assert.Contains(t, f.holds.reasons[0], tc.detail)
					f.holds.mu.Unlock()
				}
			} else {
				require.NoError(t, err)
				assert.Zero(t, f.events(t), "no security event")
				assert.Zero(t, f.holds.count())
			}

			assert.Equal(t, tc.wantRecorded, f.recorded(t), "the EK recorded")
		})
	}
}

// TestSessionIdentityReplay: each session's challenge hides a fresh secret, so an answer
// seen once (a recorded session) does not open the next session.
func TestSessionIdentityReplay(t *testing.T) {
	t.Parallel()

	f := newIdentityFixture(t)
	tpm := softtpm.MustNew()
	f.setup(t, tpm.Fingerprint(), "")

	first := &agentTPM{tpm: tpm}
	_, err := f.session(t, first)
	require.NoError(t, err)
	require.Len(t, first.secret, 32)

	_, err = f.session(t, &agentTPM{tpm: tpm, answer: first.secret})
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "the first session's answer replayed")
	require.Eventually(t, func() bool { return f.events(t) == 1 }, 5*time.Second, time.Millisecond)

	// The machine itself still proves who it is.
	_, err = f.session(t, &agentTPM{tpm: tpm})
	require.NoError(t, err)
}

// TestSessionIdentityFirstComes: two agents with different TPMs register as one unknown
// machine; the first to prove its EK has it recorded, the second is refused and never
// replaces it.
func TestSessionIdentityFirstComes(t *testing.T) {
	t.Parallel()

	f := newIdentityFixture(t)
	first, second := softtpm.MustNew(), softtpm.MustNew()

	_, err := f.session(t, &agentTPM{tpm: first})
	require.NoError(t, err)
	assert.Equal(t, first.Fingerprint(), f.recorded(t))

	require.Eventually(t, func() bool {
		e := f.view.Get(machineID)

		return e != nil && e.Machine != nil && e.Machine.EK == first.Fingerprint()
	}, 5*time.Second, time.Millisecond)

	_, err = f.session(t, &agentTPM{tpm: second})
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
	assert.Equal(t, first.Fingerprint(), f.recorded(t))
	require.Eventually(t, func() bool { return f.events(t) == 1 }, 5*time.Second, time.Millisecond)
}

// otherEKRecorded is a MachineController that recorded another EK for the machine a
// moment ago, before the view of the session's hello saw it (two agents racing for one
// machine).
type otherEKRecorded struct{}

func (otherEKRecorded) RecordEK(context.Context, string, string) error { return controllers.ErrOtherEK }

// TestSessionIdentityRecordRace: an agent whose EK cannot be recorded because another
// was recorded meanwhile is refused, unless its EK is the one bound to the machine.
func TestSessionIdentityRecordRace(t *testing.T) {
	t.Parallel()

	tpm := softtpm.MustNew()

	for _, tc := range []struct {
		name, bound string
		refused     bool
	}{
		{name: "nothing bound: refused", refused: true},
		{name: "its EK is bound: welcome", bound: tpm.Fingerprint()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			f := &identityFixture{holds: &holds{}, registry: prometheus.NewRegistry()}
			f.fixture = newFixtureWith(t, func(o *agentapi.Options) {
				o.EKs = otherEKRecorded{}
				o.Tamper = tamper.New(f.holds, nil, f.registry, zaptest.NewLogger(t))
			})
			f.setup(t, "", tc.bound)

			_, err := f.session(t, &agentTPM{tpm: tpm})
			if !tc.refused {
				require.NoError(t, err)
				assert.Zero(t, f.events(t))

				return
			}

			assert.Equal(t, codes.Unauthenticated, status.Code(err))
			require.Eventually(t, func() bool { return f.events(t) == 1 && f.holds.count() == 1 }, 5*time.Second, time.Millisecond)
		})
	}
}
