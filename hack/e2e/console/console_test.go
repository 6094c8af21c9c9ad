//go:build lab

// Package console drives the provider's web console in a real headless browser
// (Debian's chromium, through chromedp) on a lab of its own: one BIOS machine PXE-boots
// while the browser watches the machine table; the browser logs in with the token the
// provider wrote, sees the machine appear and its agent's inventory arrive live, accepts
// it, watches its wipe finish, allocates it to the stand-in Talos with a machine config
// uploaded from a file, and sees Talos installed. Screenshots of the table and of the
// machine's page go to _out/ui/ (the README shows them).
package console

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
)

const (
	// stepDeadline is generous: TCG, and other labs on two cores.
	stepDeadline = 6 * time.Minute
	talosVersion = "v1.9.0"
	consolePort  = "50043"
)

func TestConsoleE2E(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (make setup installs Debian's): the console's browser test needs it")
	}

	root := labtest.RepoRoot(t)
	bins := labtest.BuildBinaries(t, root, t.TempDir())
	dir, prefix := labtest.NewLab(t, "anvu", nil)

	cfg := bins.Config(dir, prefix)
	cfg.Machines = 1
	cfg.Firmware = []machine.Firmware{machine.BIOS}
	cfg.BMC = []lab.PowerOwner{lab.OwnerAPI}

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	m := state.MachineList()[0]
	ctl := labtest.Anvilctl(bins.Anvilctl, state.ControlSocket())

	// The console listens in the provider's namespace; the browser runs here and reaches
	// it through a forwarder on loopback.
	addr := forward(t, state.ProviderNS, net.JoinHostPort(labnet.ProviderAddr, consolePort))
	base := "https://" + addr

	token, err := os.ReadFile(filepath.Join(state.ProviderStateDir(), "ui-token"))
	require.NoError(t, err, "the provider writes the console's token on its first start")

	pin := consolePin(t, addr, filepath.Join(state.ProviderStateDir(), "ca.crt"))

	shots := filepath.Join(root, "_out", "ui")
	require.NoError(t, os.MkdirAll(shots, 0o755))

	browser := newBrowser(t, chromium, pin)

	// Log in: the table first sends the browser to the login page.
	require.NoError(t, chromedp.Do(step(t, browser),
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), strings.TrimSpace(string(token))),
		chromedp.Click(chromedp.CSS("#login")),
		present("table.machines"),
	), "log in")

	row := fmt.Sprintf(`tr[data-id="%s"]`, m.UUID)

	// The machine appears, then its agent's inventory (the vendor column) arrives: live,
	// the page is not reloaded.
	require.NoError(t, chromedp.Do(step(t, browser), present(row)), "the machine in the table")

	vendor, err := chromedp.Run(step(t, browser), chromedp.Poll[string](fmt.Sprintf(
		`(() => { const r = document.querySelector('%s'); return r && document.body.dataset.updated && r.textContent.includes(%q) ? r.textContent : null })()`,
		row, m.Vendor.Manufacturer), chromedp.WithPollingInterval(500*time.Millisecond), chromedp.WithPollingTimeout(0)))
	require.NoError(t, err, "the agent's inventory reaching the open table by a live update")
	assert.Contains(t, vendor, "pending")

	// The machine's page: accept, confirmed.
	require.NoError(t, chromedp.Do(step(t, browser),
		clickLive(row+" a"),
		clickLive("#accept"),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	), "accept")

	consequence, err := chromedp.Run(step(t, browser), chromedp.Text(chromedp.CSS(".consequence")))
	require.NoError(t, err)
	assert.Contains(t, consequence, "wipe every disk")

	require.NoError(t, chromedp.Do(step(t, browser),
		chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(".flash.notice")),
	), "accept confirmed")

	// Its wipe finishes: the erase report and the phase change on the open page.
	require.NoError(t, chromedp.Do(step(t, browser),
		present("#wipe-id"),
		poll(`document.querySelector('#phase').textContent === 'ready'`),
	), "the wipe reported and the machine ready")

	out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
	require.NoError(t, err, out)
	assert.Contains(t, out, "acceptance: accepted")
	assert.Regexp(t, `(?s)lastWipe:.*device: vda`, out)

	// Allocate, with a machine config uploaded from a file.
	configText := "version: v1alpha1\nmachine:\n  type: worker\n  token: console-e2e\n"
	config := filepath.Join(t.TempDir(), "worker.yaml")
	require.NoError(t, os.WriteFile(config, []byte(configText), 0o600))

	require.NoError(t, chromedp.Do(step(t, browser),
		chromedp.SendKeys(chromedp.CSS("#talos_version"), talosVersion),
		chromedp.SetUploadFiles(chromedp.CSS(`input[name="config"]`), []string{config}),
		chromedp.Click(chromedp.CSS("#allocate")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	), "allocate")

	consequence, err = chromedp.Run(step(t, browser), chromedp.Text(chromedp.CSS(".consequence")))
	require.NoError(t, err)
	assert.Contains(t, consequence, "Talos "+talosVersion)
	assert.Contains(t, consequence, fmt.Sprintf("machine config of %d bytes", len(configText)))

	require.NoError(t, chromedp.Do(step(t, browser),
		chromedp.Click(chromedp.CSS("#confirm")),
		present("#talos-version"),
	), "allocate confirmed")

	out, err = ctl("get", "machine", m.UUID, "-o", "yaml")
	require.NoError(t, err, out)
	assert.Contains(t, out, "talosVersion: "+talosVersion)
	assert.Contains(t, out, fmt.Sprintf("(redacted: %d bytes", len(configText)), "the uploaded config is the allocation's, byte for byte")

	// Talos boots and reports itself installed: the page shows it, and the boot's
	// timeline reaches the handoff and the install.
	require.NoError(t, chromedp.Do(step(t, browser),
		poll(`document.querySelector('#installed').textContent.startsWith('yes')`),
		present(`#timeline li[data-phase="installed"]`),
	), "Talos installed, on the page")

	timeline, err := chromedp.Run(step(t, browser), textLive("#timeline"))
	require.NoError(t, err)

	for _, phase := range []string{"script", "handoff", "installed"} {
		assert.Contains(t, timeline, phase, "the boot timeline")
	}

	events, err := chromedp.Run(step(t, browser), textLive("#events"))
	require.NoError(t, err)
	assert.Contains(t, events, "accepted from the console")
	assert.Contains(t, events, "allocated from the console")
	assert.Contains(t, events, "Talos installed")

	saveShot(t, browser, filepath.Join(shots, "machine.png"))

	// The table again, the machine installed.
	require.NoError(t, chromedp.Do(step(t, browser),
		chromedp.Navigate(base+"/ui/"),
		present(row+` .phase.installed`),
	), "the table, the machine installed")

	saveShot(t, browser, filepath.Join(shots, "machines.png"))
}

// The live regions (#live) are drawn again whenever the state changes, so a node chromedp
// resolved there may be gone by the time it acts on it (and a wait on it never ends).
// Inside them the test finds and acts in one JavaScript evaluation.

// present waits until an element matches sel.
func present(sel string) chromedp.Action[chromedp.Void] {
	return poll(fmt.Sprintf("document.querySelector(%q) !== null", sel))
}

// clickLive clicks the element sel matches once there is one, found and clicked in one
// evaluation, and waits for the page it leads to; a click lost to a redraw is tried again.
func clickLive(sel string) chromedp.Action[chromedp.Void] {
	expr := fmt.Sprintf("(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()", sel)

	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		before, err := chromedp.Location()(ctx, t)
		if err != nil {
			return err
		}

		for {
			// The evaluation may end with the navigation it started: its error then says
			// nothing; the location does.
			chromedp.Evaluate[bool](expr)(ctx, t) //nolint:errcheck // see above

			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
				if loc, err := chromedp.Location()(ctx, t); err == nil && loc != before {
					return nil
				}

				select {
				case <-ctx.Done():
					return fmt.Errorf("clicking %s: %w", sel, ctx.Err())
				case <-time.After(250 * time.Millisecond):
				}
			}
		}
	})
}

// textLive is the text of the element sel matches ("" for none).
func textLive(sel string) chromedp.Action[string] {
	return chromedp.Evaluate[string](fmt.Sprintf("(document.querySelector(%q) || {}).textContent || ''", sel))
}

// poll waits until the expression is true on the page.
func poll(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for {
			// The step's context bounds it, not Poll's own 30 s. A poll does not survive
			// a navigation (a form's answer arriving): it is started again on the new page.
			_, err := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(500*time.Millisecond), chromedp.WithPollingTimeout(0))(ctx, t)
			if err == nil || ctx.Err() != nil {
				return err
			}

			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w (last: %w)", expr, ctx.Err(), err)
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
}

// step is the browser's context bounded to one step.
func step(t testing.TB, browser context.Context) context.Context {
	ctx, cancel := context.WithTimeout(browser, stepDeadline)
	t.Cleanup(cancel)

	return ctx
}

// newBrowser starts headless chromium, which trusts the console's key (pinned: the test
// verified it against the provider's CA) and nothing else new.
func newBrowser(t testing.TB, chromium, pin string) context.Context {
	t.Helper()

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // root, in a test
		chromedp.Flag("ignore-certificate-errors-spki-list", pin),
		chromedp.WindowSize(1440, 1000),
	)

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()), opts...)
	browser, cancelBrowser := chromedp.NewContext(alloc)

	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})

	// The first run starts the browser, on the unbounded context (a timeout there would
	// stop it).
	require.NoError(t, chromedp.Do(browser), "starting chromium")

	return browser
}

// consolePin checks the console's certificate against the provider's CA, as the
// browser cannot be told of a CA without touching the system's, and returns its key's
// pin for chromium (base64 of the SHA-256 of the SubjectPublicKeyInfo).
func consolePin(t testing.TB, addr, caFile string) string {
	t.Helper()

	caPEM, err := os.ReadFile(caFile)
	require.NoError(t, err)

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))

	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	require.NoError(t, err, "the console's certificate is issued by the provider's CA, for 127.0.0.1 too")

	defer conn.Close()

	leaf := conn.ConnectionState().PeerCertificates[0]
	sum := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)

	return base64.StdEncoding.EncodeToString(sum[:])
}

// forward accepts on loopback and joins each connection to target inside namespace ns,
// until the test ends; it returns the loopback address.
func forward(t testing.TB, ns, target string) string {
	t.Helper()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)

	go func() { done <- labnet.Forward(ctx, lis, ns, target, t.Logf) }()

	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})

	return lis.Addr().String()
}

// saveShot saves a screenshot of the whole page.
func saveShot(t testing.TB, browser context.Context, path string) {
	t.Helper()

	png, err := chromedp.Run(step(t, browser), chromedp.FullScreenshot(100))
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("screenshot %s: %v", path, err)

		return
	}

	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}
