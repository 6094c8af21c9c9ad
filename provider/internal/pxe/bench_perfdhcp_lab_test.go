//go:build lab

package pxe

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestLabPerfdhcp drives the ProxyDHCP with perfdhcp (Kea) from the client namespace; it
// runs only when ANVIL_PERFDHCP=1, as a benchmark, not a check.
func TestLabPerfdhcp(t *testing.T) {
	if os.Getenv("ANVIL_PERFDHCP") != "1" {
		t.Skip("set ANVIL_PERFDHCP=1 to run the perfdhcp benchmark")
	}

	n := newTestNet(t)

	runServer(t, n.server, func(ctx context.Context) error {
		p, err := NewProxyDHCP(Config{Interface: testServerIf, ScriptURL: testScriptURL}, nil, NewMetrics(nil))
		if err != nil {
			return err
		}

		return p.Run(ctx)
	})

	time.Sleep(200 * time.Millisecond)

	// -i: DISCOVER/OFFER only; option 60 "PXEClient", option 93 BIOS.
	out, err := exec.Command("ip", "netns", "exec", n.client, "perfdhcp", "-4", "-i", "-l", testClientIf,
		"-r", "20000", "-p", "10", "-R", "100000",
		"-o", "60,505845436c69656e74", "-o", "93,0000", testServerIP.String()).CombinedOutput()
	t.Logf("%s", out)

	if err != nil {
		t.Logf("perfdhcp: %v", err)
	}
}
