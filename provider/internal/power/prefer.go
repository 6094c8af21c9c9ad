package power

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// DefaultPreferenceMemory is how long RedfishFirst remembers which protocol a BMC spoke.
const DefaultPreferenceMemory = 10 * time.Minute

// RedfishFirst drives IPMI BMCs over Redfish where they offer it — most servers' BMCs
// speak both, with one user database, so the credentials an agent provisions over IPMI
// work for Redfish too, and Redfish is the richer, better-specified protocol. A BMC that
// does not answer Redfish is driven over IPMI, unless Always says Redfish or nothing.
// Which protocol a BMC answered is remembered for Memory, so an IPMI-only BMC does not
// cost a failed Redfish attempt on every call.
type RedfishFirst struct {
	Redfish, IPMI Dialer
	// Always: Redfish only, never IPMI.
	Always bool
	// Port, HTTPS and Insecure describe the BMCs' Redfish service (0: 443 or 80).
	Port     int
	HTTPS    bool
	Insecure bool
	// Memory: how long the answer is kept (0: DefaultPreferenceMemory).
	Memory time.Duration

	mu    sync.Mutex
	known map[string]spoke
}

type spoke struct {
	redfish bool
	until   time.Time
}

// Dial implements Dialer for IPMI endpoints.
func (p *RedfishFirst) Dial(ctx context.Context, ep Endpoint) (Client, error) {
	key := ep.Address

	if !p.Always {
		if s, ok := p.remembered(key); ok && !s {
			return p.IPMI(ctx, ep)
		}
	}

	c, err := p.Redfish(ctx, p.redfishEndpoint(ep))
	if err == nil {
		p.remember(key, true)

		return c, nil
	}

	if p.Always || errors.Is(err, ErrUnauthorized) {
		// A Redfish service that refuses the credentials is a Redfish BMC: falling back
		// would hide the real problem behind a second refusal.
		return nil, err
	}

	c, ipmiErr := p.IPMI(ctx, ep)
	if ipmiErr != nil {
		return nil, fmt.Errorf("neither Redfish (%w) nor IPMI answered: %w", err, ipmiErr)
	}

	p.remember(key, false)

	return c, nil
}

func (p *RedfishFirst) redfishEndpoint(ep Endpoint) Endpoint {
	rf := ep
	rf.Backend = BackendRedfish

	scheme := "http://"
	if p.HTTPS {
		scheme = "https://"
	}

	rf.Address = scheme + ep.Address
	if strings.Contains(ep.Address, ":") && !strings.HasPrefix(ep.Address, "[") {
		rf.Address = scheme + "[" + ep.Address + "]" // an IPv6 address
	}

	rf.Port = p.Port
	rf.Insecure = p.Insecure

	return rf
}

func (p *RedfishFirst) remembered(key string) (redfish, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()

	s, found := p.known[key]
	if !found || time.Now().After(s.until) {
		return false, false
	}

	return s.redfish, true
}

func (p *RedfishFirst) remember(key string, redfish bool) {
	memory := p.Memory
	if memory <= 0 {
		memory = DefaultPreferenceMemory
	}

	p.mu.Lock()
	defer p.mu.Unlock()

	if p.known == nil {
		p.known = map[string]spoke{}
	}

	p.known[key] = spoke{redfish: redfish, until: time.Now().Add(memory)}
}
