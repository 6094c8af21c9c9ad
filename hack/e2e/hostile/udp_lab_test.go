//go:build lab

package hostile

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TFTP opcodes (RFC 1350).
const (
	tftpRRQ   = 1
	tftpWRQ   = 2
	tftpDATA  = 3
	tftpERROR = 5
)

// maxUDP is the largest IPv4 UDP payload: an oversize datagram as far as the provider
// is concerned (DHCP wants ≤ 576 or the MTU, TFTP requests are a few hundred bytes).
const maxUDP = 65507

// garbageDatagrams sends count garbage and oversize datagrams to port, paced so the lab's
// two cores still run the machine, and crafted ones that look almost right.
func garbageDatagrams(ctx context.Context, a attacker, port, count int) (int, error) {
	conn, err := a.udp()
	if err != nil {
		return 0, err
	}

	defer conn.Close()

	dst := &net.UDPAddr{IP: net.ParseIP(a.provider), Port: port}
	rng := rand.New(rand.NewPCG(uint64(port), 15)) // garbage, not secrets
	crafted := craftedDatagrams(port)
	sent := 0

	for i := range count {
		if ctx.Err() != nil {
			break
		}

		var b []byte

		switch {
		case i < len(crafted):
			b = crafted[i]
		case i%50 == 0:
			b = make([]byte, maxUDP)
			fillRandom(rng, b)
		default:
			b = make([]byte, rng.IntN(1500))
			fillRandom(rng, b)
		}

		if _, err = conn.WriteToUDP(b, dst); err != nil {
			return sent, fmt.Errorf("error sending to %s: %w", dst, err)
		}

		sent++

		if i%100 == 99 {
			time.Sleep(20 * time.Millisecond)
		}
	}

	return sent, nil
}

func fillRandom(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// craftedDatagrams are the near misses for a port: DHCP headers with lying lengths and
// options running off the end; TFTP requests without terminators, writes, absurd options.
func craftedDatagrams(port int) [][]byte {
	if port == 69 {
		long := strings.Repeat("A", 10000)

		return [][]byte{
			{},
			{0, tftpRRQ},
			append([]byte{0, tftpRRQ}, "undionly.kpxe"...),                             // no NUL, no mode
			append([]byte{0, tftpRRQ}, "undionly.kpxe\x00octet"...),                    // no final NUL
			append([]byte{0, tftpRRQ}, long+"\x00octet\x00"...),                        // a 10 kB name
			append([]byte{0, tftpWRQ}, "evil.efi\x00octet\x00"...),                     // a write
			append([]byte{0, tftpRRQ}, "undionly.kpxe\x00mail\x00"...),                 // an unknown mode
			append([]byte{0, tftpRRQ}, "x\x00octet\x00blksize\x00999999999999\x00"...), // absurd options
			append([]byte{0, tftpRRQ}, "x\x00octet\x00tsize\x00-1\x00windowsize\x000\x00"...),
			{0, tftpDATA, 0, 1, 'x'},  // data nobody asked for
			{0, 4, 0, 1},              // an ACK of nothing
			{0, tftpERROR, 0, 0, 'x'}, // an error without its NUL
			{0, 99, 1, 2, 3},          // no such opcode
		}
	}

	dhcp := func(mutate func(b []byte) []byte) []byte {
		b := make([]byte, 240)
		b[0], b[1], b[2] = 1, 1, 6 // BOOTREQUEST, ethernet, hlen 6
		copy(b[28:], []byte{0x02, 0xde, 0xad, 0xbe, 0xef, 0x01})
		binary.BigEndian.PutUint32(b[236:], 0x63825363) // the magic cookie

		return mutate(b)
	}

	return [][]byte{
		{},
		{1},
		make([]byte, 239), // one byte short of a header
		dhcp(func(b []byte) []byte { return append(b[:2], append([]byte{255}, b[3:]...)...) }),    // hlen 255
		dhcp(func(b []byte) []byte { return append(b, 53, 200, 1) }),                              // option 53 claims 200 bytes
		dhcp(func(b []byte) []byte { return append(b, 52, 1, 3, 53, 1, 1) }),                      // overload: options in file and sname, unterminated
		dhcp(func(b []byte) []byte { return append(b, 60, 255) }),                                 // a vendor class running off the end
		dhcp(func(b []byte) []byte { return append(b, 53, 1, 1, 97, 0, 93, 2, 0xff, 0xff) }),      // empty client id, unknown arch
		dhcp(func(b []byte) []byte { return append(append([]byte{2}, b[1:]...), 53, 1, 2, 255) }), // a reply sent to the server
	}
}

// tftpRead asks for name and returns the opcode of the first answer and, for an error,
// its message; a DATA answer is aborted with an error packet, as a client that gave up.
func tftpRead(ctx context.Context, a attacker, name string) (int, string, error) {
	conn, err := a.udp()
	if err != nil {
		return 0, "", err
	}

	defer conn.Close()

	rrq := append([]byte{0, tftpRRQ}, name+"\x00octet\x00"...)
	dst := &net.UDPAddr{IP: net.ParseIP(a.provider), Port: 69}
	buf := make([]byte, 2048)

	// UDP may drop a datagram (the garbage floods the same socket): ask up to 3 times.
	for range 3 {
		if ctx.Err() != nil {
			return 0, "", ctx.Err()
		}

		if _, err = conn.WriteToUDP(rrq, dst); err != nil {
			return 0, "", fmt.Errorf("error sending the read request for %q: %w", name, err)
		}

		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second)) // an open socket

		n, from, err := conn.ReadFromUDP(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}

			return 0, "", fmt.Errorf("error reading the answer for %q: %w", name, err)
		}

		if n < 4 {
			return 0, "", fmt.Errorf("a %d-byte answer for %q", n, name)
		}

		op := int(binary.BigEndian.Uint16(buf))
		if op == tftpDATA {
			_, _ = conn.WriteToUDP([]byte{0, tftpERROR, 0, 0, 'd', 'o', 'n', 'e', 0}, from) // the server times out otherwise
		}

		return op, strings.TrimRight(string(buf[4:n]), "\x00"), nil
	}

	return 0, "", fmt.Errorf("no answer for %q", name)
}

// attackDatagrams floods 67, 4011 and 69 with garbage, then checks TFTP still serves the
// iPXE binary (the real machine's boot proves the ProxyDHCP).
func attackDatagrams(ctx context.Context, t *testing.T, a attacker, perPort int) {
	for _, port := range []int{67, 4011, 69} {
		sent, err := garbageDatagrams(ctx, a, port, perPort)
		assert.NoError(t, err, "garbage to UDP %d", port)
		t.Logf("udp: %d garbage/oversize datagrams sent to %s:%d", sent, a.provider, port)
	}

	// Transfers started and abandoned: each holds the server until its retries run out.
	abandoned, err := abandonTransfers(ctx, a, 300)
	assert.NoError(t, err, "abandoned TFTP transfers")
	t.Logf("udp: %d TFTP transfers of undionly.kpxe started and never acknowledged", abandoned)

	// The flood's own address is held to 4 transfers at once until its abandoned ones end
	// (each within the 30 s stall bound): the server refuses it meanwhile ("server busy:
	// too many transfers from this address"), then serves it again.
	var (
		op  int
		msg string
	)

	deadline := time.Now().Add(time.Minute)

	for {
		op, msg, err = tftpRead(ctx, a, "undionly.kpxe")
		if err != nil || op == tftpDATA || !strings.Contains(msg, "too many transfers") || time.Now().After(deadline) {
			break
		}

		time.Sleep(2 * time.Second)
	}

	if assert.NoError(t, err, "TFTP after the flood") {
		assert.Equal(t, tftpDATA, op, "TFTP still serves undionly.kpxe after the flood (answer: %q)", msg)
	}
}

// abandonTransfers sends count read requests for the iPXE binary from one socket and
// acknowledges nothing.
func abandonTransfers(ctx context.Context, a attacker, count int) (int, error) {
	conn, err := a.udp()
	if err != nil {
		return 0, err
	}

	defer conn.Close()

	dst := &net.UDPAddr{IP: net.ParseIP(a.provider), Port: 69}
	rrq := append([]byte{0, tftpRRQ}, "undionly.kpxe\x00octet\x00"...)

	for i := range count {
		if ctx.Err() != nil {
			return i, nil
		}

		if _, err = conn.WriteToUDP(rrq, dst); err != nil {
			return i, fmt.Errorf("error sending a read request: %w", err)
		}

		if i%50 == 49 {
			time.Sleep(20 * time.Millisecond)
		}
	}

	return count, nil
}

// attackTFTPPaths asks for files outside the TFTP root, by name and through symlinks the
// test put in the root (an operator's mistake, or a writable root).
func attackTFTPPaths(ctx context.Context, t *testing.T, a attacker) {
	names := []string{
		"../../../../../../etc/passwd",
		"/../../etc/passwd",
		"..\\..\\..\\etc\\passwd",
		"ipxe.efi/../../../etc/passwd",
		"./../etc/passwd",
		"%2e%2e/%2e%2e/etc/passwd",
		"//etc/passwd",
		"escape-file",        // a symlink to /etc/passwd
		"escape-dir/passwd",  // a symlink to /etc
		"escape-dir/../../x", // a symlink, then dots
		strings.Repeat("a/", 200) + "x",
	}

	for _, name := range names {
		op, msg, err := tftpRead(ctx, a, name)
		if !assert.NoError(t, err, "TFTP %q", name) {
			continue
		}

		assert.Equal(t, tftpERROR, op, "TFTP %q is refused (answer %q)", name, msg)
	}

	t.Logf("tftp: %d traversal/symlink names refused", len(names))
}
