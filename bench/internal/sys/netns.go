package sys

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Netns is a network namespace the benchmark created; Delete removes it.
type Netns struct{ Name string }

// Exec prefixes argv to run inside the namespace.
func (n Netns) Exec(argv ...string) []string {
	return append([]string{"ip", "netns", "exec", n.Name}, argv...)
}

// Pair is two namespaces joined by a veth, each end addressed in one /24.
type Pair struct {
	Server, Client         Netns
	ServerIf, ClientIf     string
	ServerAddr, ClientAddr string
}

// NewPair creates "<prefix>-s" and "<prefix>-c" joined by a veth; server gets
// <subnet>.1/24 and client <subnet>.2/24 (subnet like "10.88.0"). On error everything
// created is removed.
func NewPair(ctx context.Context, prefix, subnet string) (*Pair, error) {
	p := &Pair{
		Server:     Netns{Name: prefix + "-s"},
		Client:     Netns{Name: prefix + "-c"},
		ServerIf:   prefix + "s",
		ClientIf:   prefix + "c",
		ServerAddr: subnet + ".1",
		ClientAddr: subnet + ".2",
	}

	steps := [][]string{
		{"ip", "netns", "add", p.Server.Name},
		{"ip", "netns", "add", p.Client.Name},
		{"ip", "link", "add", p.ServerIf, "type", "veth", "peer", "name", p.ClientIf},
		{"ip", "link", "set", p.ServerIf, "netns", p.Server.Name},
		{"ip", "link", "set", p.ClientIf, "netns", p.Client.Name},
		{"ip", "-n", p.Server.Name, "addr", "add", p.ServerAddr + "/24", "dev", p.ServerIf},
		{"ip", "-n", p.Client.Name, "addr", "add", p.ClientAddr + "/24", "dev", p.ClientIf},
		{"ip", "-n", p.Server.Name, "link", "set", "lo", "up"},
		{"ip", "-n", p.Client.Name, "link", "set", "lo", "up"},
		{"ip", "-n", p.Server.Name, "link", "set", p.ServerIf, "up"},
		{"ip", "-n", p.Client.Name, "link", "set", p.ClientIf, "up"},
	}

	for _, s := range steps {
		if _, err := Run(ctx, s...); err != nil {
			p.Delete()

			return nil, fmt.Errorf("error creating the namespaces: %w", err)
		}
	}

	return p, nil
}

// Delete removes both namespaces (and so the veth). Errors are reported on stderr only:
// it runs in cleanup paths.
func (p *Pair) Delete() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, n := range []Netns{p.Server, p.Client} {
		if _, err := os.Stat("/run/netns/" + n.Name); err != nil {
			continue
		}

		if _, err := Run(ctx, "ip", "netns", "del", n.Name); err != nil {
			fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
		}
	}
}

// UDPRcvbufErrors reads the namespace's UDP RcvbufErrors counter (datagrams dropped
// because a socket's receive buffer was full) from /proc/net/snmp.
func (n Netns) UDPRcvbufErrors(ctx context.Context) (int64, error) {
	out, err := Run(ctx, n.Exec("cat", "/proc/net/snmp")...)
	if err != nil {
		return 0, err
	}

	var header []string

	for line := range strings.SplitSeq(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "Udp:" {
			continue
		}

		if header == nil {
			header = fields

			continue
		}

		for i, name := range header {
			if name == "RcvbufErrors" && i < len(fields) {
				v, err := strconv.ParseInt(fields[i], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("error parsing RcvbufErrors %q: %w", fields[i], err)
				}

				return v, nil
			}
		}
	}

	return 0, fmt.Errorf("no UDP RcvbufErrors in /proc/net/snmp of %s", n.Name)
}
