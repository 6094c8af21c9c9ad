// Package configpatch edits Talos machine configurations that Anvil serves: the
// provider ID Cluster API matches Nodes by, the install disk an allocation resolved. It
// edits the YAML in place, so that what Anvil does not touch stays as the user wrote it.
package configpatch

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/anvil-metal/anvil/internal/disksel"
)

// ErrNotMachineConfig: the data is not a Talos machine configuration. Its message never
// quotes the data, which carries the cluster's secrets.
var ErrNotMachineConfig = errors.New("the data is not a Talos machine configuration")

// WithProviderID is the configuration with the kubelet told its provider ID, so that
// the Node carries it and Cluster API can match it to its Machine (as the established
// metadata servers do): machine.kubelet.extraArgs.provider-id.
func WithProviderID(data []byte, providerID string) ([]byte, error) {
	return EditV1Alpha1(data, func(root *yaml.Node) error {
		args, err := mappingAt(root, "machine", "kubelet", "extraArgs")
		if err != nil {
			return err
		}

		setScalar(args, "provider-id", providerID)

		return nil
	})
}

// WithInstallDisk is the configuration with Talos told its install disk by a stable
// identity: machine.install.diskSelector becomes that serial or WWID alone, and
// machine.install.disk (a kernel name, which differs between the agent's kernel and
// Talos', and between boots) goes. Every Talos Anvil allocates (v1.8 and later) reads
// both selector fields.
func WithInstallDisk(data []byte, id disksel.Identity) ([]byte, error) {
	key, value := "serial", id.Serial
	if value == "" {
		key, value = "wwid", id.WWID
	}

	if value == "" {
		return nil, errors.New("an install disk without a serial or WWID")
	}

	return EditV1Alpha1(data, func(root *yaml.Node) error {
		install, err := mappingAt(root, "machine", "install")
		if err != nil {
			return err
		}

		deleteKey(install, "disk")

		selector := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		setScalar(selector, key, value)
		setNode(install, "diskSelector", selector)

		return nil
	})
}

// EditV1Alpha1 edits the v1alpha1 document of a Talos machine configuration; every other
// document is kept byte for byte. It is edited as YAML, not decoded as Talos types, so
// that a config for a newer Talos than Anvil knows passes unchanged.
func EditV1Alpha1(data []byte, edit func(root *yaml.Node) error) ([]byte, error) {
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

		if err := edit(root.Content[0]); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotMachineConfig, err)
		}

		var buf bytes.Buffer

		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(4) // as Talos writes its configs

		if err := enc.Encode(&root); err != nil {
			return nil, fmt.Errorf("error encoding the machine configuration: %w", err)
		}

		if err := enc.Close(); err != nil {
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
	setNode(n, key, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value})
}

// setNode sets key in mapping n to value.
func setNode(n *yaml.Node, key string, value *yaml.Node) {
	if v := valueOf(n, key); v != nil {
		*v = *value

		return
	}

	n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, value)
}

// deleteKey removes key from mapping n.
func deleteKey(n *yaml.Node, key string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content = append(n.Content[:i], n.Content[i+2:]...)

			return
		}
	}
}
