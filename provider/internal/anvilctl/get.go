package anvilctl

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/spf13/cobra"

	"github.com/anvil-metal/anvil/provider/internal/fleet"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

type getOptions struct {
	output     string
	namespace  string
	selector   string
	showConfig bool

	// query is the parsed selector.
	query resource.LabelQuery
}

// machineAliases name the joined machine view rather than the bare Machine resource
// (reach that by its full type, Machines.anvil.dev).
var machineAliases = []string{"m", "machine", "machines"}

func newGetCommand(a *app) *cobra.Command {
	var opts getOptions

	cmd := &cobra.Command{
		Use:   "get <type> [id]",
		Short: "Show resources: machines, or any type the provider serves (see 'get rd')",
		Long: `Show resources.

'get machines' joins each machine's identity, intent and status; -o wide adds what a
person needs to decide on a pending machine (vendor, model, serial, CPU, memory, disks,
MACs, BMC). -l filters machines on their effective labels (static, derived under
anvil.dev/, the user's): k=v, k!=v, k, !k, k in (a,b), k notin (a,b), ANDed by commas.
Any other type or alias the provider lists in its resource definitions ('anvilctl get
rd') shows that resource, as talosctl get does; -l then filters on its own labels.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains([]string{"table", "wide", "yaml", "json"}, opts.output) {
				return fmt.Errorf("output %q is not one of table, wide, yaml, json", opts.output)
			}

			query, err := resources.ParseSelector(opts.selector)
			if err != nil {
				return err
			}

			opts.query = query

			if len(args) == 2 && len(query.Terms) > 0 {
				return fmt.Errorf("-l selects among a list: give a type without an id")
			}

			st, err := a.state()
			if err != nil {
				return err
			}

			id := ""
			if len(args) == 2 {
				id = args[1]
			}

			p := &printer{w: cmd.OutOrStdout(), format: opts.output}

			if slices.Contains(machineAliases, strings.ToLower(args[0])) {
				return getMachines(cmd.Context(), st, p, id, opts)
			}

			if p.format == "wide" {
				p.format = "table" // other types have their definition's columns only
			}

			return getResources(cmd.Context(), st, p, args[0], id, opts)
		},
	}

	cmd.Flags().StringVarP(&opts.output, "output", "o", "table", "output format: table, wide (machines), yaml or json")
	cmd.Flags().StringVarP(&opts.selector, "selector", "l", "", "label selector: k=v,k!=v,k,!k,k in (a,b)")
	cmd.Flags().StringVarP(&opts.namespace, "namespace", "n", "", "namespace (default: the type's own)")
	cmd.Flags().BoolVar(&opts.showConfig, "show-config", false, "print allocations' machine configs (they hold secrets)")

	return cmd
}

// resolveType finds the resource definition named by a type, an alias or an ID.
func resolveType(ctx context.Context, st state.State, name string) (*meta.ResourceDefinition, error) {
	rds, err := safe.StateListAll[*meta.ResourceDefinition](ctx, st)
	if err != nil {
		return nil, fmt.Errorf("error listing resource definitions: %w", err)
	}

	for rd := range rds.All() {
		spec := rd.TypedSpec()
		if strings.EqualFold(spec.Type, name) || strings.EqualFold(rd.Metadata().ID(), name) ||
			slices.ContainsFunc(spec.AllAliases, func(alias resource.Type) bool { return strings.EqualFold(alias, name) }) {
			return rd, nil
		}
	}

	return nil, fmt.Errorf("resource type %q is not known (see 'anvilctl get rd')", name)
}

func getResources(ctx context.Context, st state.State, p *printer, typeName, id string, opts getOptions) error {
	rd, err := resolveType(ctx, st, typeName)
	if err != nil {
		return err
	}

	ns := opts.namespace
	if ns == "" {
		ns = rd.TypedSpec().DefaultNamespace
	}

	md := resource.NewMetadata(ns, rd.TypedSpec().Type, id, resource.VersionUndefined)

	var items []resource.Resource

	if id != "" {
		r, err := st.Get(ctx, md)
		if err != nil {
			if state.IsNotFoundError(err) {
				return fmt.Errorf("%s %q is not known in namespace %s", rd.TypedSpec().Type, id, ns)
			}

			return fmt.Errorf("error getting %s %q: %w", rd.TypedSpec().Type, id, err)
		}

		items = []resource.Resource{r}
	} else {
		list, err := st.List(ctx, md, state.WithLabelQuery(resource.RawLabelQuery(opts.query)))
		if err != nil {
			return fmt.Errorf("error listing %s: %w", rd.TypedSpec().Type, err)
		}

		items = list.Items
	}

	for i, r := range items {
		items[i] = redact(r, opts.showConfig)
	}

	return p.resources(rd.TypedSpec(), items, id != "")
}

// redact hides what carries secrets: an intent's machine config (the cluster's secrets;
// shown with showConfig) and, always, the node unique tokens of Omni's view and of the
// Omni statuses (a machine's credential to re-join Omni).
func redact(r resource.Resource, showConfig bool) resource.Resource {
	switch r := r.(type) {
	case *resources.MachineIntent:
		if showConfig || r.TypedSpec().Allocation == nil || r.TypedSpec().Allocation.Config == "" {
			return r
		}

		out := r.DeepCopy().(*resources.MachineIntent) //nolint:forcetypeassert // DeepCopy keeps the type
		out.TypedSpec().Allocation.Config = fleet.RedactedConfig(len(r.TypedSpec().Allocation.Config))

		return out
	case *resources.OmniMachine:
		if r.TypedSpec().NodeUniqueToken == "" {
			return r
		}

		out := r.DeepCopy().(*resources.OmniMachine) //nolint:forcetypeassert // DeepCopy keeps the type
		out.TypedSpec().NodeUniqueToken = fleet.RedactedToken

		return out
	case *resources.OmniMachineStatus:
		if r.TypedSpec().WipedNodeUniqueToken == "" {
			return r
		}

		out := r.DeepCopy().(*resources.OmniMachineStatus) //nolint:forcetypeassert // DeepCopy keeps the type
		out.TypedSpec().WipedNodeUniqueToken = fleet.RedactedToken

		return out
	default:
		return r
	}
}
