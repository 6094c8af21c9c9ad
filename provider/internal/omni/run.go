package omni

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/omni/client/pkg/infra/controllers"
	"github.com/siderolabs/omni/client/pkg/omni/resources/infra"
	omnires "github.com/siderolabs/omni/client/pkg/omni/resources/omni"
	"github.com/siderolabs/omni/client/pkg/omni/resources/siderolink"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/anvil-metal/anvil/provider/internal/omnilink"
)

// LabelVersion carries the provider's version on its status in Omni (the status spec
// has no field for it).
const LabelVersion = "anvil.dev/version"

// Retry backoff of the connection's loops while Omni is unreachable.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// Run publishes the provider's status in Omni and its health heartbeat, and follows the
// join config, until ctx is done. Omni being unreachable is no failure: the loops retry.
func (c *Connection) Run(ctx context.Context) error {
	eg, ctx := errgroup.WithContext(ctx)

	eg.Go(func() error { return retry(ctx, c.opts.Logger, "publishing the provider status", c.publishStatus) })
	eg.Go(func() error { return retry(ctx, c.opts.Logger, "reporting the provider health", c.runHealth) })
	eg.Go(func() error { return retry(ctx, c.opts.Logger, "following the join config", c.followJoinConfig) })

	if c.opts.ProviderSocket != "" {
		eg.Go(func() error {
			return retry(ctx, c.opts.Logger, "handing the join config to the provider", c.pushJoinArgs)
		})
		eg.Go(func() error {
			return retry(ctx, c.opts.Logger, "handing Omni's machines to the provider", c.followMachines)
		})
		eg.Go(func() error {
			return retry(ctx, c.opts.Logger, "writing the provider's machine statuses into Omni", c.followStatuses)
		})
	}

	return eg.Wait()
}

// retry runs f until it returns nil or ctx is done, backing off after each failure.
func retry(ctx context.Context, logger *zap.Logger, what string, f func(context.Context) error) error {
	wait := retryMin

	for {
		started := time.Now()

		err := f(ctx)
		if err == nil || ctx.Err() != nil {
			return nil //nolint:nilerr // stopping is not a failure
		}

		if time.Since(started) > retryMax {
			wait = retryMin
		}

		logger.Warn("Omni: "+what+" failed; retrying", zap.Error(err), zap.Duration("after", wait))

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}

		wait = min(wait*2, retryMax)
	}
}

// publishStatus creates or updates the provider's status: its name, description, icon,
// version, and the label that makes Omni treat it as a static provider (machines it
// PXE-boots, not machines it creates on request).
func (c *Connection) publishStatus(ctx context.Context) error {
	_, err := safe.StateModifyWithResult(ctx, c.st, infra.NewProviderStatus(c.opts.ProviderID), func(ps *infra.ProviderStatus) error {
		spec := ps.TypedSpec().Value
		spec.Name, spec.Description, spec.Icon = c.opts.Name, c.opts.Description, Icon

		ps.Metadata().Labels().Set(omnires.LabelIsStaticInfraProvider, "")

		if c.opts.Version != "" {
			ps.Metadata().Labels().Set(LabelVersion, c.opts.Version)
		}

		return nil
	})
	if err != nil {
		return fmt.Errorf("error writing the provider status: %w", err)
	}

	c.opts.Logger.Info("Omni: provider status published", zap.String("provider", c.opts.ProviderID), zap.String("omni", c.opts.Endpoint))

	return nil
}

// runHealth runs Omni's own health-status controller against Omni's state: a heartbeat
// every interval, which Omni shows as the provider connected.
func (c *Connection) runHealth(ctx context.Context) error {
	ctrl, err := controllers.NewProviderHealthStatusController(c.opts.ProviderID, controllers.ProviderHealthStatusOptions{})
	if err != nil {
		return fmt.Errorf("error creating the health controller: %w", err)
	}

	rt, err := runtime.NewRuntime(c.st, c.opts.Logger.Named("omni-runtime"))
	if err != nil {
		return fmt.Errorf("error creating the controller runtime: %w", err)
	}

	if err = rt.RegisterController(ctrl); err != nil {
		return fmt.Errorf("error registering the health controller: %w", err)
	}

	if err = rt.Run(ctx); err != nil {
		return fmt.Errorf("Omni controller runtime: %w", err) //nolint:staticcheck // Omni is a name
	}

	return nil
}

// followJoinConfig watches the provider's join config and keeps its kernel args.
func (c *Connection) followJoinConfig(ctx context.Context) error {
	events := make(chan state.Event)

	if err := c.st.Watch(ctx, siderolink.NewProviderJoinConfig(c.opts.ProviderID).Metadata(), events); err != nil {
		return fmt.Errorf("error watching the join config: %w", err)
	}

	for {
		var ev state.Event

		select {
		case <-ctx.Done():
			return nil
		case ev = <-events:
		}

		switch ev.Type {
		case state.Created, state.Updated:
			jc, ok := ev.Resource.(*siderolink.ProviderJoinConfig)
			if !ok {
				return fmt.Errorf("the join config is a %T", ev.Resource)
			}

			args := slices.Clone(jc.TypedSpec().Value.GetConfig().GetKernelArgs())
			if args == nil {
				args = []string{}
			}

			config := jc.TypedSpec().Value.GetConfig().GetConfig()

			c.mu.Lock()
			changed := !slices.Equal(c.joinArgs, args) || c.joinConfig != config
			c.joinArgs, c.joinConfig = args, config
			c.mu.Unlock()

			if changed {
				c.opts.Logger.Info("Omni: join config read", zap.Strings("kernel_args", omnilink.Redact(args)))

				select {
				case c.joinChanged <- struct{}{}:
				default:
				}
			}
		case state.Destroyed:
			c.mu.Lock()
			c.joinArgs, c.joinConfig = nil, ""
			c.mu.Unlock()

			c.opts.Logger.Warn("Omni: the join config is gone: is the infra provider deleted?", zap.String("provider", c.opts.ProviderID))
		case state.Errored:
			return fmt.Errorf("the join config watch failed: %w", ev.Error)
		case state.Bootstrapped, state.Noop:
		}
	}
}
