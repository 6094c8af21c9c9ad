// Package resourcewire is how COSI resources travel in agent messages: each a marshaled
// cosi.resource.Resource (github.com/cosi-project/runtime/api/v1alpha1), so Talos
// machinery types cross as they are.
package resourcewire

import (
	"fmt"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	gproto "google.golang.org/protobuf/proto"
)

// MaxResources bounds what one report may carry.
const MaxResources = 4096

// Decode unmarshals reported resources (marshaled cosi.resource.Resource messages). A
// resource of a type the provider does not know is skipped, not an error: newer agents
// may report more.
func Decode(raw [][]byte) ([]resource.Resource, error) {
	if len(raw) > MaxResources {
		return nil, fmt.Errorf("%d resources, at most %d are accepted", len(raw), MaxResources)
	}

	out := make([]resource.Resource, 0, len(raw))

	for i, b := range raw {
		var msg v1alpha1.Resource
		if err := gproto.Unmarshal(b, &msg); err != nil {
			return nil, fmt.Errorf("error decoding resource %d: %w", i, err)
		}

		pr, err := protobuf.Unmarshal(&msg)
		if err != nil {
			return nil, fmt.Errorf("error decoding resource %d: %w", i, err)
		}

		r, err := protobuf.UnmarshalResource(pr)
		if err != nil {
			continue
		}

		out = append(out, r)
	}

	return out, nil
}

// Encode marshals resources for a report (the agent's side of Decode).
func Encode(resources []resource.Resource) ([][]byte, error) {
	out := make([][]byte, 0, len(resources))

	for _, r := range resources {
		pr, err := protobuf.FromResource(r, protobuf.WithoutYAML())
		if err != nil {
			return nil, fmt.Errorf("error encoding %s: %w", r.Metadata(), err)
		}

		msg, err := pr.Marshal()
		if err != nil {
			return nil, fmt.Errorf("error encoding %s: %w", r.Metadata(), err)
		}

		b, err := gproto.Marshal(msg)
		if err != nil {
			return nil, fmt.Errorf("error encoding %s: %w", r.Metadata(), err)
		}

		out = append(out, b)
	}

	return out, nil
}
