package labnet

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"github.com/anvil-metal/anvil/internal/netns"
)

// A site of provider replicas (lab up --ha): each replica, with the etcd member beside
// it, in a namespace of its own joined to the bridge, and the address machines reach the
// provider at (VIP) held by whichever replica keepalived elects among the ready ones.
const (
	// MaxReplicas is how many replica namespaces a lab may have.
	MaxReplicas = 3
	// VIP is the site's provider address: every replica advertises it.
	VIP = "10.77.0.10"
	// ReplicaVeth is a replica's end of its veth, in its namespace.
	ReplicaVeth = "veth0"

	replicaAddrBase = 11 // replica i is 10.77.0.(11+i)
)

// ReplicaNamespace is the namespace of replica i of the lab named prefix.
func ReplicaNamespace(prefix string, i int) string { return prefix + "-r" + strconv.Itoa(i) }

// ReplicaAddr is replica i's own address.
func ReplicaAddr(i int) string { return "10.77.0." + strconv.Itoa(replicaAddrBase+i) }

func replicaBridgeVeth(i int) string { return "veth-r" + strconv.Itoa(i) }

// UpReplica creates replica i's namespace, if missing, joined to the bridge by a veth
// with its own address; the lab network must be up. Like Omni's, it takes no router
// advertisement: nothing in it reaches past the lab.
func (n *Net) UpReplica(i int) error {
	if i < 0 || i >= MaxReplicas || len(n.ReplicaNS) <= i {
		return fmt.Errorf("no replica %d in a lab of at most %d", i, MaxReplicas)
	}

	ns := n.ReplicaNS[i]
	if err := netns.Create(ns); err != nil {
		return err
	}

	p, err := netns.OpenLinks(n.ProviderNS)
	if err != nil {
		return err
	}

	defer p.Close()

	r, err := netns.OpenLinks(ns)
	if err != nil {
		return err
	}

	defer r.Close()

	exists, err := r.Exists(ReplicaVeth)
	if err != nil {
		return err
	}

	steps := []func() error{
		func() error { return r.SetUp("lo") },
	}

	if !exists {
		steps = append(steps,
			func() error { return p.AddVeth(replicaBridgeVeth(i), ReplicaVeth, ns) },
			func() error { return p.SetMaster(replicaBridgeVeth(i), Bridge) },
			func() error { return p.SetUp(replicaBridgeVeth(i)) },
			func() error { return refuseRA(ns, ReplicaVeth) },
			func() error { return r.AddAddr(ReplicaVeth, netip.MustParsePrefix(ReplicaAddr(i)+"/24")) },
		)
	}

	steps = append(steps, func() error { return r.SetUp(ReplicaVeth) })

	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("error joining replica %d's namespace to the lab network: %w", i, err)
		}
	}

	return nil
}

// refuseRA turns off IPv6 autoconfiguration of routes on link in ns.
func refuseRA(ns, link string) error {
	return netns.Do(ns, func() error {
		// /proc/sys/net is the namespace of the thread that opens it.
		path := "/proc/sys/net/ipv6/conf/" + link + "/accept_ra"
		if err := os.WriteFile(path, []byte("0\n"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("error writing %s: %w", path, err)
		}

		return nil
	})
}
