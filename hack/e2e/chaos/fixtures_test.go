//go:build lab

package chaos

import (
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/anvil-metal/anvil/internal/testprovider"
)

func TestMain(m *testing.M) { os.Exit(testprovider.Main(m)) }

// bmcs are the grid's machines' BMCs: an HTTP power API (powerwire) in front of the
// simulated machines' own, logging every call by machine, and flapping (dropping calls
// at random) for the machines set so.
type bmcs struct {
	handler http.Handler
	// url is where the BMCs answer.
	url string

	mu       sync.Mutex
	rng      *rand.Rand
	calls    map[string][]string // machine → "METHOD path" of each call
	flapping map[string]bool
	failed   map[string]int
}

// flapOdds: a flapping BMC drops one call in flapOdds, at random (a fixed sequence).
// Random, not periodic: the provider's retries come at powers of two of its backoff,
// which a period can keep missing.
const flapOdds = 3

func newBMCs(next http.Handler) *bmcs {
	return &bmcs{handler: next, rng: rand.New(rand.NewPCG(15, 15)), calls: map[string][]string{}, flapping: map[string]bool{}, failed: map[string]int{}}
}

func (b *bmcs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	uuid := strings.Split(strings.TrimPrefix(r.URL.Path, "/machines/"), "/")[0]

	b.mu.Lock()
	b.calls[uuid] = append(b.calls[uuid], r.Method+" "+r.URL.Path)
	down := b.flapping[uuid] && b.rng.IntN(flapOdds) == 0

	if down {
		b.failed[uuid]++
	}
	b.mu.Unlock()

	if down {
		// As a BMC gone from the network: the connection drops with no answer.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()

				return
			}
		}

		http.Error(w, "BMC down", http.StatusServiceUnavailable)

		return
	}

	b.handler.ServeHTTP(w, r)
}

func (b *bmcs) flap(uuid string) {
	b.mu.Lock()
	defer b.mu.Unlock()

	b.flapping[uuid] = true
}

func (b *bmcs) callsOf(uuid string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()

	return append([]string(nil), b.calls[uuid]...)
}

func (b *bmcs) failures(uuid string) int {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.failed[uuid]
}

// switchable is a handler that can be made unreachable: while down every connection
// is dropped unanswered (the Image Factory out of reach).
type switchable struct {
	next http.Handler

	mu   sync.Mutex
	down bool
	hits int // requests dropped while down
}

func (s *switchable) set(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.down = down
}

func (s *switchable) dropped() int {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.hits
}

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	down := s.down

	if down {
		s.hits++
	}
	s.mu.Unlock()

	if !down {
		s.next.ServeHTTP(w, r)

		return
	}

	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()

			return
		}
	}

	http.Error(w, "unreachable", http.StatusServiceUnavailable)
}
