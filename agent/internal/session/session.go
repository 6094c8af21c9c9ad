// Package session keeps the agent's session with the provider: it dials the provider over
// TLS (pinning its CA's fingerprint), says hello with the per-boot token, reports the
// inventory and the outcome of orders, hands orders to the executor, and reconnects with
// backoff when the provider goes away.
package session

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/anvil-metal/anvil/agent/internal/config"
	"github.com/anvil-metal/anvil/agent/internal/orders"
	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
)

// Backoff between attempts.
const (
	backoffFirst = 500 * time.Millisecond
	backoffMax   = 15 * time.Second
	maxMessage   = 4 << 20
)

// Options configure the session.
type Options struct {
	Config       config.Config
	BootID       string
	AgentVersion string
	// MACs returns the physical NICs' addresses.
	MACs func() []string
	// KexecUnavailable says why this agent cannot kexec ("" when it can), so that the
	// provider does not order it to.
	KexecUnavailable string
	// Inventory returns the inventory, encoded (resourcewire), and a channel closed when
	// it changes.
	Inventory func(ctx context.Context) ([][]byte, <-chan struct{}, error)
	Executor  *orders.Executor
	Logger    *zap.Logger
	// Identity is the machine's TPM identity (agent/internal/tpm): shown in each hello,
	// it answers the provider's challenge. Nil: the agent found no TPM, and shows none.
	Identity Identity
	// OnRegistered is called after each successful hello (for the boot timeline).
	OnRegistered func()
	// OnOrder, when set, is called with each order as it arrives, before the executor
	// has it; OnClosed with why each session ended (the fleet simulator's events).
	OnOrder  func(o *agentv1.Order)
	OnClosed func(err error)
}

// Identity is a machine's TPM identity: what a hello shows of it, and the activation of
// the credential the provider makes for it.
type Identity interface {
	Hello() *agentv1.TPMIdentity
	Activate(ctx context.Context, c *agentv1.Challenge) ([]byte, error)
}

// maxFailure bounds the TPM error an activation carries to the provider's log.
const maxFailure = 256

// Run keeps a session up until ctx is done.
func Run(ctx context.Context, opts Options) error {
	creds, err := Credentials(opts.Config.CAFingerprint)
	if err != nil {
		return err
	}

	conn, err := grpc.NewClient(opts.Config.Provider,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
	)
	if err != nil {
		return fmt.Errorf("error dialing the provider %s: %w", opts.Config.Provider, err)
	}

	defer conn.Close()

	client := agentv1.NewAgentServiceClient(conn)
	backoff := backoffFirst

	for {
		start := time.Now()

		err := session(ctx, client, opts)
		if opts.OnClosed != nil {
			opts.OnClosed(err)
		}

		if ctx.Err() != nil {
			return nil
		}

		if time.Since(start) > backoffMax {
			backoff = backoffFirst // the session was up a while: start again quickly
		}

		level := zap.WarnLevel
		if status.Code(err) == codes.Unauthenticated {
			level = zap.ErrorLevel // a stale boot: a newer PXE boot of this machine superseded it
		}

		// Jittered: a provider restart ends every agent's session at once, and agents
		// retrying in lockstep made each retry a storm of TLS handshakes that timed out
		// (bench fleet, 10,000 agents).
		wait := backoff/2 + rand.N(backoff/2+1) //nolint:gosec // spreading retries needs no secret randomness

		opts.Logger.Log(level, "session with the provider ended; reconnecting", zap.Error(err), zap.Duration("in", wait))

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}

		backoff = min(2*backoff, backoffMax)
	}
}

func session(ctx context.Context, client agentv1.AgentServiceClient, opts Options) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	stream, err := client.Session(ctx)
	if err != nil {
		return err
	}

	sent := map[string]*agentv1.OrderResult{}
	results := opts.Executor.Results()

	for _, r := range results {
		sent[r.GetOrderId()] = r
	}

	var macs []string
	if opts.MACs != nil {
		macs = opts.MACs()
	}

	hello := &agentv1.Hello{
		MachineId: opts.Config.MachineID, Token: opts.Config.Token, BootId: opts.BootID,
		AgentVersion: opts.AgentVersion, Macs: macs, Results: results, KexecUnavailable: opts.KexecUnavailable,
		WipeScopes: true,
	}
	if opts.Identity != nil {
		hello.Tpm = opts.Identity.Hello()
	}

	if err = stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Hello{Hello: hello}}); err != nil {
		return endedBy(err, func() error { return drained(stream) })
	}

	first, err := stream.Recv()
	if err != nil {
		return err
	}

	if ch := first.GetChallenge(); ch != nil {
		if first, err = answer(ctx, stream, opts, ch); err != nil {
			return err
		}
	}

	if first.GetWelcome() == nil {
		return errors.New("the provider did not welcome the agent")
	}

	opts.Logger.Info("registered with the provider", zap.String("provider", opts.Config.Provider), zap.String("machine", first.GetWelcome().GetMachineId()))

	if opts.OnRegistered != nil {
		opts.OnRegistered()
	}

	incoming := make(chan *agentv1.Order)
	recvErr := make(chan error, 1)

	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err

				return
			}

			if o := msg.GetOrder(); o != nil {
				select {
				case incoming <- o:
				case <-ctx.Done():
					return
				}
			}
		}
	}()

	// Once the receiver runs, why the provider ended the stream is its error.
	received := func() error {
		for {
			select {
			case err := <-recvErr:
				return err
			case <-incoming:
				// The stream is over: the provider sends a pending order again to the
				// next session.
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}

	inventoryChanged, err := sendInventory(ctx, stream, opts)
	if err != nil {
		return endedBy(err, received)
	}

	for {
		changed := opts.Executor.Changed()

		// Report every outcome that changed since it was last sent.
		for _, r := range opts.Executor.Results() {
			if prev, ok := sent[r.GetOrderId()]; ok && proto.Equal(prev, r) {
				continue
			}

			if err = stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Result{Result: r}}); err != nil {
				return endedBy(err, received)
			}

			sent[r.GetOrderId()] = r
			opts.Executor.Reported(r)
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case err = <-recvErr:
			return err
		case o := <-incoming:
			opts.Logger.Info("order received", zap.String("order", o.GetId()))

			if opts.OnOrder != nil {
				opts.OnOrder(o)
			}

			if err := opts.Executor.Handle(o); err != nil {
				opts.Logger.Warn("order refused", zap.String("order", o.GetId()), zap.Error(err))
			}
		case <-changed:
		case <-inventoryChanged:
			if inventoryChanged, err = sendInventory(ctx, stream, opts); err != nil {
				return endedBy(err, received)
			}
		}
	}
}

// answer proves the machine's TPM identity: the secret the TPM recovers from the
// provider's challenge, or why it recovered none. It returns the provider's next message.
func answer(ctx context.Context, stream agentv1.AgentService_SessionClient, opts Options, ch *agentv1.Challenge) (*agentv1.ProviderMessage, error) {
	if opts.Identity == nil {
		return nil, errors.New("the provider challenged an agent that showed no TPM identity")
	}

	activation := &agentv1.Activation{}

	secret, err := opts.Identity.Activate(ctx, ch)
	if err != nil {
		opts.Logger.Error("the TPM could not answer the provider's identity challenge", zap.Error(err))

		activation.Failure = err.Error()
		if len(activation.Failure) > maxFailure {
			activation.Failure = strings.ToValidUTF8(activation.Failure[:maxFailure], "") // a string field must be UTF-8
		}
	}

	activation.Secret = secret

	if err = stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Activation{Activation: activation}}); err != nil {
		return nil, endedBy(err, func() error { return drained(stream) })
	}

	return stream.Recv()
}

func sendInventory(ctx context.Context, stream agentv1.AgentService_SessionClient, opts Options) (<-chan struct{}, error) {
	if opts.Inventory == nil {
		return nil, nil //nolint:nilnil // no inventory: a nil channel, which never fires
	}

	resources, changed, err := opts.Inventory(ctx)
	if err != nil {
		// What there is of the inventory is better than none: report the error and go on.
		opts.Logger.Warn("error taking the inventory", zap.Error(err))
	}

	if err := stream.Send(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Inventory{Inventory: &agentv1.Inventory{Resources: resources}}}); err != nil {
		return nil, err
	}

	return changed, nil
}

// Credentials returns TLS credentials that trust exactly the CA with the fingerprint: the
// provider's certificate must chain to it and name the address dialed.
func Credentials(fingerprint string) (credentials.TransportCredentials, error) {
	want, err := hex.DecodeString(strings.ReplaceAll(fingerprint, ":", ""))
	if err != nil || len(want) != sha256.Size {
		return nil, errors.New("the provider CA fingerprint is not a SHA-256")
	}

	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is verified below against the pinned CA, not the system roots.
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection checks the chain against the pinned CA
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPinned(cs, want)
		},
	}

	return credentials.NewTLS(cfg), nil
}

func verifyPinned(cs tls.ConnectionState, fingerprint []byte) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the provider presented no certificate")
	}

	roots := x509.NewCertPool()

	for _, cert := range cs.PeerCertificates {
		sum := sha256.Sum256(cert.Raw)
		if string(sum[:]) == string(fingerprint) {
			roots.AddCert(cert)
		}
	}

	leaf := cs.PeerCertificates[0]

	intermediates := x509.NewCertPool()
	for _, cert := range cs.PeerCertificates[1:] {
		intermediates.AddCert(cert)
	}

	host := cs.ServerName
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}

	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, DNSName: host}); err != nil {
		return fmt.Errorf("the provider's certificate does not chain to the pinned CA: %w", err)
	}

	return nil
}

// endedBy returns why the provider ended the stream where Send failed with io.EOF: gRPC's
// sign that the stream is over, whose status (a refused token, a limit) only the
// receiving side learns. Any other error is returned as it is.
func endedBy(err error, received func() error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}

	return received()
}

// drained reads an ended stream to its status, where nothing else receives from it.
func drained(stream agentv1.AgentService_SessionClient) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}
