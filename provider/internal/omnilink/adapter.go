package omnilink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// AdapterBinary is the Omni adapter's name, looked for beside the provider's own binary,
// then on PATH.
const AdapterBinary = "omni-adapter"

// Restart backoff of the adapter, and the time it gets to stop.
const (
	restartMin = time.Second
	restartMax = 30 * time.Second
	stopGrace  = 5 * time.Second
)

// Adapter is how the provider runs the Omni adapter.
type Adapter struct {
	// Bin is the adapter binary; "" looks for AdapterBinary.
	Bin string
	// Args are the adapter's flags (Omni's endpoint, the provider's ID…); the provider
	// socket is added.
	Args []string
	// ServiceAccountKey goes to the adapter in its environment (OMNI_SERVICE_ACCOUNT_KEY),
	// never on its command line, which any user can read.
	ServiceAccountKey string
	Logger            *zap.Logger
}

// FindBin returns the adapter binary: bin if set, else AdapterBinary beside the running
// executable, else on PATH.
func FindBin(bin string) (string, error) {
	if bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("the Omni adapter %s: %w", bin, err)
		}

		return bin, nil
	}

	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), AdapterBinary)
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}

	path, err := exec.LookPath(AdapterBinary)
	if err != nil {
		return "", fmt.Errorf("no Omni adapter (%s) beside the provider nor on PATH: make build builds it, --omni-adapter names it", AdapterBinary)
	}

	return path, nil
}

// Run runs the adapter, talking to link's socket, until ctx is done, starting it again
// when it exits, with backoff.
func (a *Adapter) Run(ctx context.Context, link *Link) error {
	bin, err := FindBin(a.Bin)
	if err != nil {
		return err
	}

	wait := restartMin

	for {
		started := time.Now()

		err := a.runOnce(ctx, bin, link)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // stopping is not a failure
		}

		if time.Since(started) > restartMax {
			wait = restartMin
		}

		a.Logger.Warn("the Omni adapter exited; starting it again", zap.Error(err), zap.Duration("after", wait))

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}

		wait = min(wait*2, restartMax)
	}
}

func (a *Adapter) runOnce(ctx context.Context, bin string, link *Link) error {
	cmd := exec.Command(bin, append(a.Args, "--provider-socket", link.Socket())...)
	cmd.Env = append(os.Environ(), "OMNI_SERVICE_ACCOUNT_KEY="+a.ServiceAccountKey)
	// Its logs are the provider's: both write JSON lines to stderr.
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// It dies with the provider, even killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}

	if err := cmd.Start(); err != nil {
		return fmt.Errorf("error starting the Omni adapter: %w", err)
	}

	done := make(chan error, 1)

	go func() { done <- cmd.Wait() }()

	select {
	case err := <-done:
		if err == nil {
			err = errors.New("it exited")
		}

		return err
	case <-ctx.Done():
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)

	select {
	case <-done: //nolint:errcheck // stopped as asked: how it exited does not matter
	case <-time.After(stopGrace):
		_ = cmd.Process.Kill()
		<-done //nolint:errcheck // killed: how it exited does not matter
	}

	return nil
}
