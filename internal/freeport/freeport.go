// Package freeport hands out loopback ports for the servers that tests and benchmarks
// start and must name before they bind. A port from bind(0) is one the kernel hands out
// again as soon as it is released — to the next bind(0) in this process or another
// test binary — so these come from below the kernel's ephemeral range, which it gives
// to no socket by itself; each is handed out once per process and is free at the time.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// span is how many ports below the ephemeral range are drawn from.
const span = 10000

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// TCP returns a TCP port free on 127.0.0.1.
func TCP() (int, error) { return pick("tcp") }

// UDP returns a UDP port free on 127.0.0.1.
func UDP() (int, error) { return pick("udp") }

func pick(network string) (int, error) {
	low, high := drawRange()

	mu.Lock()
	defer mu.Unlock()

	for range 200 {
		port := low + rand.IntN(high-low) //nolint:gosec // spreads callers over the range; not a secret
		if handed[port] || !free(network, port) {
			continue
		}

		handed[port] = true

		return port, nil
	}

	return 0, fmt.Errorf("no free %s port in %d-%d on 127.0.0.1 after 200 tries", network, low, high-1)
}

// drawRange is [low, high): the span of ports below the ephemeral range.
func drawRange() (low, high int) {
	high = 32768 // Linux's default ephemeral range starts here

	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 1024+span {
				high = v
			}
		}
	}

	return high - span, high
}

// free tells whether port can be bound on 127.0.0.1 now.
func free(network string, port int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	switch network {
	case "udp":
		c, err := net.ListenPacket("udp4", addr)
		if err != nil {
			return false
		}

		c.Close()

		return true
	default:
		l, err := net.Listen("tcp4", addr)
		if err != nil {
			return false
		}

		l.Close()

		return true
	}
}
