package ipmi

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/provider/internal/power"
)

// The tests against a real BMC simulator (ipmi_sim) are lab tests: ipmi_lab_test.go.

// Credentials of the unit tests' endpoints, which no BMC ever checks.
const (
	testUser     = "admin"
	testPassword = "s3cret-pw"
)

func TestUnreachable(t *testing.T) {
	// silent: a socket that is bound but never answers (a BMC that is down behind a
	// switch); refused: nothing bound, loopback answers with ICMP port unreachable.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { silent.Close() })

	for _, tc := range []struct {
		name string
		port int
	}{
		{"nothing listening", freeUDPPort(t)},
		{"nothing answering", silent.LocalAddr().(*net.UDPAddr).Port},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const (
				deadline = 1500 * time.Millisecond
				// Room for a loaded machine, yet deadline+slack stays under the 3 s go-ipmi
				// takes to give up by itself ((retries+1) x attemptTimeout), so a Dial that
				// ignored ctx still fails.
				slack = time.Second
			)

			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()

			start := time.Now()

			c, err := Dial(ctx, power.Endpoint{Backend: power.BackendIPMI, Address: "127.0.0.1", Port: tc.port, Username: testUser, Password: testPassword})
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}

			if took := time.Since(start); took > deadline+slack {
				t.Fatalf("Dial returned after %s, past the %s deadline", took, deadline)
			}

			if !errors.Is(err, power.ErrUnreachable) {
				t.Fatalf("error does not wrap ErrUnreachable: %v", err)
			}

			if strings.Contains(err.Error(), testPassword) {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

func freeUDPPort(t *testing.T) int {
	t.Helper()

	port, err := freeport.UDP()
	if err != nil {
		t.Fatal(err)
	}

	return port
}
