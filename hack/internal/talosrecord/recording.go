package talosrecord

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Recording is what real Talos answered the recorder's requests and the events it sent
// its event sink, step by step, normalised: no timestamps, IDs, node names, addresses or
// key material, only the shapes and values Talos' callers (Omni, Anvil's provider,
// talosctl) rely on.
type Recording struct {
	// TalosVersion is the Talos recorded (make talos' talos.json).
	TalosVersion string `json:"talosVersion"`
	// Recorder is the command that made the recording.
	Recorder string `json:"recorder"`
	// Notes say how the requests were made and what the recording leaves out.
	Notes []string `json:"notes,omitempty"`
	Steps []Step   `json:"steps"`
}

// Step is one stage of the machine's life the recorder drove: the calls it made there
// and the events Talos sent meanwhile, in the order they arrived.
type Step struct {
	Name   string  `json:"name"`
	Calls  []Call  `json:"calls,omitempty"`
	Events []Event `json:"events,omitempty"`
}

// Call is one request and its answer.
type Call struct {
	// Name says what was asked (the probes' names: replays look calls up by it).
	Name string `json:"name"`
	// Method is the gRPC method called.
	Method string `json:"method"`
	// Code is the gRPC status code's name, "OK" for an answer.
	Code string `json:"code"`
	// Message is the error's message.
	Message string `json:"message,omitempty"`
	// Response is the answer, normalised (Normalize).
	Response any `json:"response,omitempty"`
}

// Event is one event Talos sent to the sink.
type Event struct {
	// Summary is the event in a line: its kind and the fields its kind is told by
	// (Summarize).
	Summary string `json:"summary"`
	// Type is the event's type URL, as Talos' sink controller sends it.
	Type string `json:"type"`
	// Actor is "reset" for an event of the reset the recorder asked for (its actor ID),
	// "other" for another actor's, empty for none.
	Actor string `json:"actor,omitempty"`
	// Data is the event, normalised.
	Data any `json:"data,omitempty"`
}

// Step returns the step by name, nil when there is none.
func (r *Recording) Step(name string) *Step {
	for i := range r.Steps {
		if r.Steps[i].Name == name {
			return &r.Steps[i]
		}
	}

	return nil
}

// Call returns the step's call by name, nil when there is none.
func (s *Step) Call(name string) *Call {
	if s == nil {
		return nil
	}

	for i := range s.Calls {
		if s.Calls[i].Name == name {
			return &s.Calls[i]
		}
	}

	return nil
}

// Load reads a recording.
func Load(path string) (*Recording, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("error reading the recording: %w", err)
	}

	var r Recording

	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()

	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("error decoding the recording %s: %w", path, err)
	}

	return &r, nil
}

// Save writes the recording to path, indented, through a file beside it renamed into
// place.
func (r *Recording) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("error encoding the recording: %w", err)
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("error making the recording's directory: %w", err)
	}

	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("error writing the recording: %w", err)
	}

	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("error writing the recording: %w", err)
	}

	return nil
}

// Placeholders stand for what varies from run to run.
const (
	Node      = "<node>"
	Build     = "<build>"
	Addresses = "<addresses>"
	Actor     = "<actor>"
	Schematic = "<schematic>"
	Manifest  = "<manifest>"
)

// scrubbed are the JSON fields (protojson's names) replaced wherever they are: they name
// the node, the build or the moment, never what a caller acts on.
var scrubbed = map[string]string{
	"hostname":  Node,
	"sha":       Build,
	"built":     Build,
	"goVersion": Build,
	"addresses": Addresses,
	"actorId":   Actor,
}

// Normalize is m as JSON values (protojson's field names), scrubbed of what varies from
// run to run. Nil for a nil message.
func Normalize(m proto.Message) any {
	if m == nil {
		return nil
	}

	// Defaults too: a mode of REBOOT (0) or a ready of false is an answer.
	b, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(m)
	if err != nil {
		return "unencodable: " + err.Error()
	}

	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "undecodable: " + err.Error()
	}

	return scrub(v)
}

func scrub(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if p, ok := scrubbed[k]; ok {
				if s, isString := e.(string); isString && s == "" {
					continue
				}

				v[k] = p

				continue
			}

			v[k] = scrub(e)
		}
	case []any:
		for i, e := range v {
			v[i] = scrub(e)
		}
	}

	return v
}

// Get returns the value at a dotted path in normalised JSON ("messages.0.mode"), nil
// when there is none.
func Get(v any, path string) any {
	for part := range strings.SplitSeq(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			v = c[part]
		case []any:
			var i int
			if _, err := fmt.Sscanf(part, "%d", &i); err != nil || i < 0 || i >= len(c) {
				return nil
			}

			v = c[i]
		default:
			return nil
		}
	}

	return v
}
