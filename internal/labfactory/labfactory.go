// Package labfactory is a local stand-in for the Image Factory, for the lab, tests and
// benchmarks (the real one cannot be reached from them): it registers schematics as the
// factory's POST /schematics does, answering with the schematic's content-addressed ID.
package labfactory

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync"

	"github.com/siderolabs/image-factory/pkg/schematic"
)

// maxSchematic bounds a schematic document.
const maxSchematic = 1 << 20

// Factory is the stand-in's handler.
type Factory struct {
	mu         sync.Mutex
	schematics map[string][]byte
	order      []string
}

// New returns an empty factory.
func New() *Factory {
	return &Factory{schematics: map[string][]byte{}}
}

// ServeHTTP implements the factory's schematic endpoint.
func (f *Factory) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/schematics" {
		http.NotFound(w, r)

		return
	}

	body, err := io.ReadAll(io.LimitReader(r.Body, maxSchematic))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	sc, err := schematic.Unmarshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	id, err := sc.ID()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	f.mu.Lock()
	if _, ok := f.schematics[id]; !ok {
		f.order = append(f.order, id)
	}

	f.schematics[id] = body
	f.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"id": id, "schematic": string(body)}) //nolint:errcheck
}

// Registered lists the schematic IDs registered, in the order first seen.
func (f *Factory) Registered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()

	return slices.Clone(f.order)
}

// Schematic returns a registered schematic's document.
func (f *Factory) Schematic(id string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()

	b, ok := f.schematics[id]

	return b, ok
}
