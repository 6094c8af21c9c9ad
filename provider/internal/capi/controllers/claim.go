package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	infrav1 "github.com/anvil-metal/anvil/api/infrastructure/v1beta1"
)

// OwnerOf is the owner a MetalMachine claims servers as: its namespace and name. Not its
// UID: clusterctl move and a restore from backup make the same MetalMachine again under
// another UID, and it must find its claim. Two MetalMachines of one name never hold a
// claim at once: the first keeps its finalizer until its claim is released.
func OwnerOf(mm *infrav1.MetalMachine) string {
	return fmt.Sprintf("capi/%s/%s", mm.Namespace, mm.Name)
}

// ProviderID is the providerID of the machine on server id.
func ProviderID(id string) string { return infrav1.ProviderIDPrefix + id }

// Candidates are the servers a MetalMachine may claim, best first: free ones (no
// allocation, not cordoned) that its selector matches, those with nothing owed before
// those still being wiped. Among equals the order is the owner's own (a hash of owner
// and server), so that machines claiming at once mostly try different servers.
func Candidates(owner string, sel labels.Selector, servers []infrav1.Server) []string {
	type cand struct {
		name string
		rank int
		key  uint64
	}

	var cands []cand

	for _, s := range servers {
		if s.Status.Allocation != nil || s.Status.Cordoned || !sel.Matches(labels.Set(s.Labels)) {
			continue
		}

		rank := 0

		switch s.Status.State {
		case infrav1.ServerAvailable:
		case infrav1.ServerPreparing:
			rank = 1
		case infrav1.ServerAllocated, infrav1.ServerInstalled:
			continue
		default:
			continue
		}

		h := fnv.New64a()
		_, _ = h.Write([]byte(owner + "\x00" + s.Name)) // a hash never fails to write

		cands = append(cands, cand{name: s.Name, rank: rank, key: h.Sum64()})
	}

	slices.SortFunc(cands, func(a, b cand) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}

		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}

		return 0
	})

	out := make([]string, len(cands))
	for i, c := range cands {
		out[i] = c.name
	}

	return out
}

// Hash is the SHA-256 of the bootstrap data, hex: what status.bootstrapDataHash records.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)

	return hex.EncodeToString(sum[:])
}
