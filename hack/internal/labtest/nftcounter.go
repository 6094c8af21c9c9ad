package labtest

import (
	"context"
	"fmt"
	"regexp"
	"strconv"

	"github.com/anvil-metal/anvil/internal/netns"
)

var counterPackets = regexp.MustCompile(`packets (\d+) bytes`)

// NFTCounter reads the packets of the named counter (`counter <name> {}` in an NFT
// table, counted by `counter name <name>` rules) in table of namespace ns.
func NFTCounter(ctx context.Context, ns, table, name string) (int64, error) {
	out, err := netns.Command(ctx, ns, "nft", "list", "counter", "inet", table, name).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("nft list counter inet %s %s in %s: %w: %s", table, name, ns, err, out)
	}

	m := counterPackets.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no packet count in nft's answer: %s", out)
	}

	n, err := strconv.ParseInt(string(m[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("error reading nft's packet count: %w", err)
	}

	return n, nil
}
