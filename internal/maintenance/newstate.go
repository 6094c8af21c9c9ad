package maintenance

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/registry"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// NewState returns an in-memory state with meta's own types, the runtime namespace and
// the definitions of defs (and their namespaces) registered: a machine's state for a
// caller without an inventory of its own, such as the lab's stand-in Talos. New adds
// its own definitions.
func NewState(ctx context.Context, defs ...meta.ResourceWithRD) (state.State, error) {
	st := state.WrapCore(namespaced.NewState(inmem.Build))

	namespaces := registry.NewNamespaceRegistry(st)
	if err := namespaces.RegisterDefault(ctx); err != nil {
		return nil, fmt.Errorf("error registering the meta namespace: %w", err)
	}

	seen := map[string]bool{}

	for _, ns := range append([]string{runtimeres.NamespaceName}, namespacesOf(defs)...) {
		if seen[ns] {
			continue
		}

		seen[ns] = true

		if err := namespaces.Register(ctx, ns, ns); err != nil {
			return nil, fmt.Errorf("error registering namespace %s: %w", ns, err)
		}
	}

	rds := registry.NewResourceRegistry(st)
	if err := rds.RegisterDefault(ctx); err != nil {
		return nil, fmt.Errorf("error registering meta's resource definitions: %w", err)
	}

	for _, r := range defs {
		if err := rds.Register(ctx, r); err != nil {
			return nil, fmt.Errorf("error registering resource definition %s: %w", r.ResourceDefinition().Type, err)
		}
	}

	return st, nil
}

func namespacesOf(defs []meta.ResourceWithRD) []string {
	nss := make([]string, 0, len(defs))

	for _, r := range defs {
		nss = append(nss, r.ResourceDefinition().DefaultNamespace)
	}

	return nss
}
