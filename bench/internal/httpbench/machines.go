// Package httpbench measures iPXE boot-script requests per second and latency with
// 10,000 machines in Anvil's state, against nginx serving a static script of the same
// size, and the provider's memory with those machines loaded.
package httpbench

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Kind is the final state a seeded machine is put in, and so the script it gets.
type Kind int

// Seeded states.
const (
	// KindDisk: accepted, allocated, installed: the "boot from disk" script.
	KindDisk Kind = iota
	// KindTalos: accepted, allocated, not installed: the Talos boot script.
	KindTalos
	// KindAgent: accepted only: the agent script.
	KindAgent
)

func (k Kind) String() string {
	return [...]string{"disk", "talos", "agent"}[k]
}

// KindOf is the mix: 40% disk, 40% talos, 20% agent.
func KindOf(i int) Kind {
	switch i % 5 {
	case 0, 1:
		return KindDisk
	case 2, 3:
		return KindTalos
	default:
		return KindAgent
	}
}

// Mix is each kind's share of the machines.
var Mix = map[Kind]float64{KindDisk: 0.4, KindTalos: 0.4, KindAgent: 0.2}

// UUID is machine i's SMBIOS UUID (never a null one).
func UUID(i int) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
}

// MAC is machine i's MAC, in iPXE's hexhyp form.
func MAC(i int) string {
	return fmt.Sprintf("02-00-%02x-%02x-%02x-%02x", i>>24&0xff, i>>16&0xff, i>>8&0xff, i&0xff)
}

// Path is machine i's boot-script request, as iPXE sends it.
func Path(i int) string {
	return "/ipxe/boot.ipxe?uuid=" + UUID(i) + "&mac=" + MAC(i) + "&arch=x86_64&platform=efi"
}

// RandomPath returns the path of a random one of n machines.
func RandomPath(n int) func(r *rand.Rand) string {
	return func(r *rand.Rand) string { return Path(r.IntN(n)) }
}

// residues are the i%5 values of each kind (see KindOf).
var residues = map[Kind][]int{KindDisk: {0, 1}, KindTalos: {2, 3}, KindAgent: {4}}

// WrkScript is a wrk Lua script requesting a random one of n machines per request, with
// the same paths as Path; with kinds, only machines of those kinds.
func WrkScript(n int, kinds ...Kind) string {
	var b strings.Builder

	fmt.Fprintf(&b, "local n = %d\nlocal keep = {", n)

	if len(kinds) == 0 {
		kinds = []Kind{KindDisk, KindTalos, KindAgent}
	}

	for _, k := range kinds {
		for _, r := range residues[k] {
			fmt.Fprintf(&b, "[%d] = true, ", r)
		}
	}

	b.WriteString(`}
local paths = {}
for i = 0, n - 1 do
  if keep[i % 5] then
    local b3 = math.floor(i / 16777216) % 256
    local b2 = math.floor(i / 65536) % 256
    local b1 = math.floor(i / 256) % 256
    local b0 = i % 256
    paths[#paths + 1] = string.format("/ipxe/boot.ipxe?uuid=%08x-0000-4000-8000-%012x&mac=02-00-%02x-%02x-%02x-%02x&arch=x86_64&platform=efi", i, i, b3, b2, b1, b0)
  end
end
math.randomseed(os.time())
request = function()
  return wrk.format("GET", paths[math.random(#paths)])
end
`)

	return b.String()
}
