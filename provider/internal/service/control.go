package service

import (
	"context"

	"github.com/siderolabs/image-factory/pkg/schematic"

	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/state"
)

// controlAPI builds the control API: the state API (read-only) and the transitions.
func (env *environment) controlAPI() runner {
	srv := control.New(env.store, control.Options{
		SocketPath:      env.controlSocket(),
		InstallRecorder: env.installs,
		SchematicFor: func(_ context.Context, _ string, alloc state.Allocation) (schematic.Schematic, error) {
			return env.scripts.Schematic(alloc.Extensions, alloc.KernelArgs), nil
		},
		Logger: env.logger.Named("control"),
	})

	return runner{name: "control", run: srv.Run}
}
