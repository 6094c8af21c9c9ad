package labtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/netns"
)

// NFT loads an nftables table of rules — `table inet <table> { … }` — into the namespace
// ns, for a test to cut traffic; the function it returns deletes the table (once; later
// calls do nothing). A table left behind goes with the namespace.
func NFT(t testing.TB, ns, table, rules string) func() {
	t.Helper()

	nft := func(stdin string, args ...string) error {
		// Run in cleanups too, after the test's context is done.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
		defer cancel()

		cmd := netns.Command(ctx, ns, "nft", args...)
		cmd.Stdin = strings.NewReader(stdin)

		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, out)
		}

		return nil
	}

	require.NoError(t, nft(fmt.Sprintf("table inet %s {\n%s\n}\n", table, rules), "-f", "-"))

	var once sync.Once

	return func() {
		once.Do(func() {
			if netns.Exists(ns) {
				assert.NoError(t, nft("", "delete", "table", "inet", table))
			}
		})
	}
}
