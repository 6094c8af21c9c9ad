package anvilctl

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
)

func newLabelCommand(a *app) *cobra.Command {
	var remove []string

	cmd := &cobra.Command{
		Use:   "label <id> [key=value ...] [--remove key ...]",
		Short: "Set or remove a machine's own labels (keys under anvil.dev/ are derived, not set)",
		Example: `  anvilctl machine label 4c4c4544-... team=storage example.com/tier=gold
  anvilctl machine label 4c4c4544-... --remove team`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &controlv1.SetLabelsRequest{MachineId: args[0], Set: map[string]string{}, Remove: remove}

			for _, pair := range args[1:] {
				k, v, ok := strings.Cut(pair, "=")
				if !ok || k == "" {
					return fmt.Errorf("label %q: want key=value (an empty value is key=)", pair)
				}

				req.Set[k] = v
			}

			if len(req.Set) == 0 && len(req.Remove) == 0 {
				return fmt.Errorf("give labels to set (key=value) or to remove (--remove key)")
			}

			c, err := a.transitions()
			if err != nil {
				return err
			}

			resp, err := c.SetLabels(cmd.Context(), req)
			if err != nil {
				return err
			}

			labels := resp.GetIntent().GetLabels()

			pairs := make([]string, 0, len(labels))
			for _, k := range slices.Sorted(maps.Keys(labels)) {
				pairs = append(pairs, k+"="+labels[k])
			}

			if len(pairs) == 0 {
				pairs = []string{"none"}
			}

			_, err = fmt.Fprintf(cmd.OutOrStdout(), "machine %s: labels %s\n", args[0], strings.Join(pairs, ","))

			return err
		},
	}

	cmd.Flags().StringSliceVar(&remove, "remove", nil, "label keys to remove, comma-separated or repeated")

	return cmd
}
