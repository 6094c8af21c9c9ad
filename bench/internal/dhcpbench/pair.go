package dhcpbench

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/anvil-metal/anvil/internal/netns"
)

// nsPair is two network namespaces joined by a veth, each end addressed in one /24: the
// servers run in one, perfdhcp in the other.
type nsPair struct {
	server, client         string // namespaces
	serverIf, clientIf     string
	serverAddr, clientAddr string
}

// newPair creates "<prefix>-s" and "<prefix>-c" joined by a veth; the server's end gets
// <subnet>.1/24 and the client's <subnet>.2/24 (subnet like "10.88.0"). On error
// everything created is removed.
func newPair(prefix, subnet string) (p *nsPair, err error) {
	p = &nsPair{
		server: prefix + "-s", client: prefix + "-c",
		serverIf: prefix + "s", clientIf: prefix + "c",
		serverAddr: subnet + ".1", clientAddr: subnet + ".2",
	}

	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("error creating the benchmark's namespaces: %w", err), p.delete())
		}
	}()

	serverPrefix, err := netip.ParsePrefix(p.serverAddr + "/24")
	if err != nil {
		return nil, err
	}

	clientPrefix, err := netip.ParsePrefix(p.clientAddr + "/24")
	if err != nil {
		return nil, err
	}

	for _, ns := range []string{p.server, p.client} {
		if err := netns.Create(ns); err != nil {
			return nil, err
		}
	}

	s, err := netns.OpenLinks(p.server)
	if err != nil {
		return nil, err
	}

	defer s.Close()

	c, err := netns.OpenLinks(p.client)
	if err != nil {
		return nil, err
	}

	defer c.Close()

	steps := []func() error{
		func() error { return s.AddVeth(p.serverIf, p.clientIf, p.client) },
		func() error { return s.AddAddr(p.serverIf, serverPrefix) },
		func() error { return c.AddAddr(p.clientIf, clientPrefix) },
		func() error { return s.SetUp("lo") },
		func() error { return c.SetUp("lo") },
		func() error { return s.SetUp(p.serverIf) },
		func() error { return c.SetUp(p.clientIf) },
	}

	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}

	return p, nil
}

// delete removes both namespaces, and with them the veth. The processes in them must be
// stopped first.
func (p *nsPair) delete() error {
	return errors.Join(netns.Delete(p.server), netns.Delete(p.client))
}

// udpRcvbufErrors reads namespace ns's UDP RcvbufErrors counter (datagrams dropped
// because a socket's receive buffer was full).
func udpRcvbufErrors(ns string) (int64, error) {
	var snmp []byte

	err := netns.Do(ns, func() error {
		var err error

		// thread-self: the namespace is this thread's, not the process's.
		snmp, err = os.ReadFile("/proc/thread-self/net/snmp")

		return err
	})
	if err != nil {
		return 0, fmt.Errorf("error reading the UDP counters of %s: %w", ns, err)
	}

	v, err := parseRcvbufErrors(string(snmp))
	if err != nil {
		return 0, fmt.Errorf("error reading the UDP counters of %s: %w", ns, err)
	}

	return v, nil
}

// parseRcvbufErrors finds RcvbufErrors in /proc/net/snmp: a "Udp:" line of names, then
// one of values.
func parseRcvbufErrors(snmp string) (int64, error) {
	var header []string

	for line := range strings.SplitSeq(snmp, "\n") {
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

	return 0, errors.New("no UDP RcvbufErrors in /proc/net/snmp")
}
