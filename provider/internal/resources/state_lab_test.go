//go:build lab

package resources_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/internal/testprovider"
)

func TestMain(m *testing.M) { os.Exit(testprovider.Main(m)) }

const labMachine = "4c4c4544-0000-1000-8000-00000000c0de"

// newLabProvider starts the real provider on loopback with the boot services it does not
// need here off, and one machine registered by a boot script fetch.
func newLabProvider(t *testing.T, stateDir string) *testprovider.Provider {
	t.Helper()

	p := testprovider.New(t, true, "--disable-dhcp-proxy", "--disable-tftp", "--image-cache-size", "0")
	if stateDir != "" {
		p.StateDir = stateDir
		p.Args = append(p.Args, "--state-dir", stateDir)
	}

	p.Start()

	code, _ := p.BootScript(labMachine, "52:54:00:00:c0:de")
	require.Equal(t, 200, code)
	p.WaitMachine(labMachine)

	return p
}

// TestLabStateDamagedRefusesAndRestores: with the real binaries, a truncated state.db
// (and separately a missing one) makes the provider refuse to start, naming the backup to
// restore; anvilctl state restore puts it back (refused while the provider runs) and the
// provider starts on it with the machine as it was.
func TestLabStateDamagedRefusesAndRestores(t *testing.T) {
	for _, damage := range []string{"truncated", "missing", "garbage"} {
		t.Run(damage, func(t *testing.T) {
			p := newLabProvider(t, "")
			p.MustAnvilctl("machine", "accept", labMachine)

			// An online backup through the control API; the provider keeps it too.
			out := filepath.Join(t.TempDir(), "online.db")
			t.Log(p.MustAnvilctl("state", "backup", "--out", out))

			// A restore while the provider runs is refused.
			msg, err := p.Anvilctl("state", "restore", "--state-dir", p.StateDir, out)
			require.Error(t, err)
			require.Contains(t, msg, "the provider is running")

			p.Kill()

			db := filepath.Join(p.StateDir, "state.db")

			switch damage {
			case "truncated":
				fi, err := os.Stat(db)
				require.NoError(t, err)
				require.NoError(t, os.Truncate(db, fi.Size()/3))
			case "missing":
				require.NoError(t, os.Remove(db))
			case "garbage":
				require.NoError(t, os.WriteFile(db, []byte(strings.Repeat("\xa5", 64<<10)), 0o600))
			}

			log, err := runToExit(t, p)
			require.Error(t, err, "the provider must refuse to start:\n%s", log)
			require.Contains(t, log, "refusing to start")

			named := regexp.MustCompile(`anvilctl state restore --state-dir \S+ (\S+/backups/state-\S+\.db)`).FindStringSubmatch(log)
			require.NotNil(t, named, "the refusal names a backup:\n%s", log)
			t.Logf("refusal: %s", strings.TrimSpace(lastLine(log, "refusing to start")))

			t.Log(p.MustAnvilctl("state", "restore", "--state-dir", p.StateDir, named[1]))

			if damage != "missing" {
				kept, _ := filepath.Glob(db + ".replaced-*")
				require.Len(t, kept, 1, "the damaged file is kept")
			}

			p.Start()
			require.Contains(t, p.MustAnvilctl("get", "machine", labMachine), "accepted", "the restored machine is as it was")
		})
	}
}

// TestLabStateDiskFull: the state directory on a small tmpfs; when it is full, writes
// fail with an error naming ENOSPC (to anvilctl and in the log), the state is not
// damaged (a SIGKILLed provider starts on it again), and writes work again once space
// returns.
func TestLabStateDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}

	dir := t.TempDir()
	require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m,mode=0700"))

	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})

	p := newLabProvider(t, dir)

	filler := filepath.Join(dir, "filler")
	fill(t, filler)

	// Writes that need new pages fail: register machines until one does (bounded).
	var failed string

	for i := range 300 {
		id := fmt.Sprintf("4c4c4544-0000-1000-8000-%012d", 1000+i)
		if msg, err := p.Anvilctl("machine", "bmc", "set", id, "--kind", "api", "--address", "http://127.0.0.1:1/"+strings.Repeat("x", 512)); err != nil {
			failed = msg

			break
		}
	}

	require.NotEmpty(t, failed, "no write failed on a full disk")
	t.Logf("a write on the full disk: %s", strings.TrimSpace(failed))
	require.Contains(t, failed, "no space left on device", "the error names ENOSPC")

	msg, err := p.Anvilctl("state", "backup", "--out", filepath.Join(t.TempDir(), "full.db"))
	require.Error(t, err, "a backup on a full disk fails: %s", msg)
	t.Logf("a backup on the full disk: %s", strings.TrimSpace(msg))
	require.Contains(t, msg, "no space left on device")

	// A power loss now: the state must still open and verify.
	p.Kill()
	require.NoError(t, os.Remove(filler))
	p.Start()
	require.Contains(t, p.MustAnvilctl("get", "machine", labMachine), labMachine)

	// Full again, with the provider running: then space returns and writes succeed.
	fill(t, filler)

	_, err = p.Anvilctl("machine", "accept", labMachine)
	for i := 0; err == nil && i < 300; i++ {
		id := fmt.Sprintf("4c4c4544-0000-1000-8000-%012d", 2000+i)
		_, err = p.Anvilctl("machine", "bmc", "set", id, "--kind", "api", "--address", "http://127.0.0.1:1/"+strings.Repeat("x", 512))
	}

	require.Error(t, err, "no write failed on the full disk")
	require.NoError(t, os.Remove(filler))

	p.MustAnvilctl("machine", "accept", labMachine)
	p.MustAnvilctl("machine", "bmc", "set", "4c4c4544-0000-1000-8000-000000009999", "--kind", "api", "--address", "http://127.0.0.1:1/")
	t.Log(p.MustAnvilctl("state", "backup", "--out", filepath.Join(t.TempDir(), "after.db")))

	p.Kill()
	p.Start()
	require.Contains(t, p.MustAnvilctl("get", "machine", labMachine), "accepted", "nothing written after space returned was lost")
}

// fill writes path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	require.NoError(t, err)

	defer f.Close()

	chunk := make([]byte, 64<<10)

	for range 1 << 14 { // bounded: 1 GiB
		if _, err := f.Write(chunk); err != nil {
			require.True(t, errors.Is(err, syscall.ENOSPC), "filling: %v", err)

			return
		}
	}

	t.Fatal("the filesystem never filled")
}

// runToExit runs the provider on p's arguments and waits (bounded) for it to exit; it
// returns its output and exit error.
func runToExit(t *testing.T, p *testprovider.Provider) (string, error) {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	out, err := exec.CommandContext(ctx, p.Binary(), p.Args...).CombinedOutput()
	require.NoError(t, ctx.Err(), "the provider did not exit:\n%s", out)

	return string(out), err
}

// lastLine returns the last line of s that contains sub.
func lastLine(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}

	return ""
}
