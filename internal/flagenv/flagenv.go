// Package flagenv lets every command-line flag also be set from the environment:
// --api-port reads ANVIL_API_PORT when the flag is not given.
package flagenv

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Prefix is the environment prefix of Anvil's flags.
const Prefix = "ANVIL_"

// Name returns the environment variable for a flag: api-port → ANVIL_API_PORT.
func Name(flag string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Apply sets every flag not given on the command line from its environment variable,
// if set. aliases map a flag to other variables read as well (Omni's OMNI_ENDPOINT).
func Apply(fs *pflag.FlagSet, aliases map[string][]string) error {
	var err error

	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}

		for _, env := range append([]string{Name(f.Name)}, aliases[f.Name]...) {
			value, ok := os.LookupEnv(env)
			if !ok {
				continue
			}

			if setErr := fs.Set(f.Name, value); setErr != nil {
				err = fmt.Errorf("invalid value of %s: %w", env, setErr)
			}

			return
		}
	})

	return err
}

// Annotate appends the variable's name to every flag's usage, so --help tells it.
func Annotate(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}

		f.Usage += " [$" + Name(f.Name) + "]"
	})
}
