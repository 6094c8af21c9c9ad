package boot

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// maxCachedScripts bounds the rendered scripts kept (about 1 KiB each): past it the
// cache starts again empty, as machines come and go.
const maxCachedScripts = 1 << 14

// talosScript is a Talos chain script rendered for one machine, with what it was
// rendered from.
type talosScript struct {
	allocation, schematic, version, arch string
	body                                 string
}

// matches says whether the script was rendered for this request and allocation.
func (e *talosScript) matches(req Request, alloc *resources.Allocation) bool {
	return e.allocation == alloc.ID && e.schematic == alloc.SchematicID &&
		e.version == alloc.TalosVersion && e.arch == req.Arch
}

// scriptCache maps machine IDs to their rendered Talos scripts. Its zero value is empty
// and ready; it is safe for concurrent use.
type scriptCache struct {
	m sync.Map // machine ID → *talosScript
	n atomic.Int64
}

func (c *scriptCache) get(machineID string) *talosScript {
	v, ok := c.m.Load(machineID)
	if !ok {
		return nil
	}

	return v.(*talosScript) //nolint:forcetypeassert // the map holds only *talosScript
}

func (c *scriptCache) put(machineID string, e *talosScript) {
	// A copy of the ID: the request's may be a slice of its whole query string.
	if _, loaded := c.m.Swap(strings.Clone(machineID), e); loaded {
		return
	}

	if c.n.Add(1) > maxCachedScripts {
		c.m.Clear()
		c.n.Store(0)
	}
}
