package controllers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
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

// ErrNotMachineConfig: the bootstrap data is not a Talos machine configuration. Its
// message never quotes the data, which carries the cluster's secrets.
var ErrNotMachineConfig = errors.New("the bootstrap data is not a Talos machine configuration")

// WithProviderID is the bootstrap data with the kubelet told its provider ID, so that the
// Node carries it and Cluster API can match it to its Machine (as the established
// metadata servers do). The data must be a Talos machine configuration: the v1alpha1
// document gets machine.kubelet.extraArgs.provider-id; every other document is kept
// byte for byte. It is edited as YAML, not decoded as Talos types, so that a config for
// a newer Talos than the manager knows passes unchanged.
func WithProviderID(data []byte, providerID string) ([]byte, error) {
	docs := splitDocuments(data)

	found := false

	for i, doc := range docs {
		var root yaml.Node
		if err := yaml.Unmarshal(doc, &root); err != nil {
			return nil, fmt.Errorf("%w: document %d is not YAML", ErrNotMachineConfig, i+1)
		}

		if len(root.Content) == 0 || !isV1Alpha1(root.Content[0]) {
			continue
		}

		if found {
			return nil, fmt.Errorf("%w: it has two v1alpha1 documents", ErrNotMachineConfig)
		}

		found = true

		args, err := mappingAt(root.Content[0], "machine", "kubelet", "extraArgs")
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotMachineConfig, err)
		}

		setScalar(args, "provider-id", providerID)

		var buf bytes.Buffer

		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(4) // as Talos writes its configs

		if err = enc.Encode(&root); err != nil {
			return nil, fmt.Errorf("error encoding the machine configuration: %w", err)
		}

		if err = enc.Close(); err != nil {
			return nil, fmt.Errorf("error encoding the machine configuration: %w", err)
		}

		docs[i] = buf.Bytes()
	}

	if !found {
		return nil, fmt.Errorf("%w: it has no v1alpha1 document", ErrNotMachineConfig)
	}

	return bytes.Join(docs, []byte("---\n")), nil
}

// splitDocuments splits a YAML stream at its "---" lines; each document keeps its bytes
// (and its final newline), the separators dropped.
func splitDocuments(data []byte) [][]byte {
	var (
		docs  [][]byte
		start int
	)

	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			end = len(data) - off
		} else {
			end++
		}

		if line := bytes.TrimRight(data[off:off+end], " \t\r\n"); bytes.Equal(line, []byte("---")) {
			if off > start {
				docs = append(docs, data[start:off])
			}

			start = off + end
		}

		off += end
	}

	if start < len(data) {
		docs = append(docs, data[start:])
	}

	return docs
}

// isV1Alpha1 says whether a document is Talos's v1alpha1 machine configuration: the one
// with "version: v1alpha1" (the others have apiVersion and kind).
func isV1Alpha1(n *yaml.Node) bool {
	if n.Kind != yaml.MappingNode {
		return false
	}

	v := valueOf(n, "version")

	return v != nil && v.Kind == yaml.ScalarNode && v.Value == "v1alpha1"
}

// mappingAt returns the mapping at path under n, making the missing (or null) ones.
func mappingAt(n *yaml.Node, path ...string) (*yaml.Node, error) {
	for i, key := range path {
		v := valueOf(n, key)
		if v == nil {
			v = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
		}

		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			*v = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		}

		if v.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s is not a mapping", strings.Join(path[:i+1], "."))
		}

		n = v
	}

	return n, nil
}

// valueOf returns the value of key in mapping n, nil when it has none.
func valueOf(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}

	return nil
}

// setScalar sets key in mapping n to the string value.
func setScalar(n *yaml.Node, key, value string) {
	if v := valueOf(n, key); v != nil {
		*v = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}

		return
	}

	n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value})
}

// Hash is the SHA-256 of the bootstrap data, hex: what status.bootstrapDataHash records.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)

	return hex.EncodeToString(sum[:])
}
