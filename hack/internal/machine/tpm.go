package machine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/internal/proc"
)

// A machine's TPM 2.0 is Debian's swtpm: a process of its own beside QEMU, which QEMU's
// TPM emulator backend reaches through a control socket in the machine's directory.
//
// The TPM's state (its endorsement seed, hence its EK; NV indices, persistent handles)
// lives in TPMStateDir, which is kept as long as the machine's directory: a reset or a
// power cycle keeps the same TPM, as a server keeps its chip, and a machine given a new
// directory has another TPM. Nothing is provisioned up front (no swtpm_setup, no EK
// certificate): libtpms makes the endorsement seed when the state is new, and the EK is
// derived from it by whoever asks (TPM2_CreatePrimary with the default EK template),
// the same every boot.
//
// swtpm lives as long as its QEMU: --terminate ends it when QEMU drops the connection
// (power off, QEMU gone however), and Stop ends it in any case, so a machine powered off
// leaves no swtpm behind.

// TPMStateDir holds the machine's TPM state; TPMLog is swtpm's log.
func (m *Machine) TPMStateDir() string { return filepath.Join(m.Dir, "tpm") }
func (m *Machine) TPMLog() string      { return filepath.Join(m.Dir, "swtpm.log") }
func (m *Machine) tpmSocket() string   { return filepath.Join(m.Dir, "swtpm.sock") }
func (m *Machine) tpmPIDFile() string  { return filepath.Join(m.Dir, "swtpm.pid") }

// SWTPM is the TPM emulator the lab runs (Debian's swtpm).
var SWTPM = "swtpm"

// tpmStartTimeout bounds the wait for swtpm's control socket.
const tpmStartTimeout = 10 * time.Second

// TPMPID is the pid of the machine's swtpm, 0 when none runs.
func (m *Machine) TPMPID() int {
	b, err := os.ReadFile(m.tpmPIDFile())
	if err != nil {
		return 0
	}

	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if !proc.Alive(pid) {
		return 0
	}

	// The pid file outlives a swtpm that ended with its QEMU: the pid is this machine's
	// swtpm only while its command line names this machine's socket.
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !strings.Contains(string(cmdline), "path="+m.tpmSocket()) {
		return 0
	}

	return pid
}

// swtpmArgs is swtpm's command line (without the binary).
func (m *Machine) swtpmArgs() []string {
	return []string{
		"socket", "--tpm2",
		"--tpmstate", "dir=" + m.TPMStateDir() + ",mode=0600",
		"--ctrl", "type=unixio,path=" + m.tpmSocket() + ",mode=0600",
		// The TPM starts itself up (TPM2_Startup(CLEAR)) on every power-on and reset, as
		// a TPM does whose firmware did it: a firmware that sends its own Startup is
		// answered TPM_RC_INITIALIZE, which SeaBIOS and OVMF go past with the hierarchies
		// enabled (measured: the EK is created after cold and warm boots of both).
		"--flags", "startup-clear",
		"--terminate",
		"--daemon", "--pid", "file=" + m.tpmPIDFile(),
		"--log", "file=" + m.TPMLog() + ",level=1",
	}
}

// tpmArgs attach the machine's swtpm to QEMU as a TIS TPM: on the ISA bus of a q35
// machine (tpm-tis), described to the guest in ACPI (MSFT0101), where the built-in
// tpm_tis of Debian's amd64 kernel finds it. On arm64's virt machine it is a platform
// device (tpm-tis-device, QEMU's only TPM there), which Debian's arm64 kernel cannot
// drive (no tpm_tis): the lab gives arm64 machines no TPM.
func (m *Machine) tpmArgs() []string {
	device := "tpm-tis"
	if m.Firmware == ARM64 {
		device = "tpm-tis-device"
	}

	return []string{
		"-chardev", "socket,id=chrtpm,path=" + m.tpmSocket(),
		"-tpmdev", "emulator,id=tpm0,chardev=chrtpm",
		"-device", device + ",tpmdev=tpm0",
	}
}

// startTPM runs the machine's swtpm (daemonized; it outlives the command that powers
// the machine on, as QEMU does) and waits for its control socket. One left from a start
// whose QEMU never came is stopped first: it holds the state's lock.
func (m *Machine) startTPM(ctx context.Context) error {
	if err := m.stopTPM(ctx); err != nil {
		return err
	}

	if err := os.MkdirAll(m.TPMStateDir(), 0o700); err != nil {
		return fmt.Errorf("error creating the TPM state of %s: %w", m.Name, err)
	}

	if err := os.Remove(m.tpmSocket()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("error removing the old TPM socket of %s: %w", m.Name, err)
	}

	// --daemon: swtpm returns once its socket listens, or says why not.
	if out, err := proc.Run(ctx, append([]string{SWTPM}, m.swtpmArgs()...)...); err != nil {
		return fmt.Errorf("error starting the TPM of %s (make setup installs swtpm; see %s): %w: %s", m.Name, m.TPMLog(), err, out)
	}

	deadline := time.Now().Add(tpmStartTimeout)

	for {
		if _, err := os.Stat(m.tpmSocket()); err == nil && m.TPMPID() != 0 {
			return nil
		}

		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("the TPM of %s did not listen within %s; see %s", m.Name, tpmStartTimeout, m.TPMLog()),
				m.stopTPM(ctx))
		}

		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), m.stopTPM(context.WithoutCancel(ctx)))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopTPM ends the machine's swtpm if one runs (it ends by itself when its QEMU goes;
// this is for the one whose QEMU never came, or hangs), and removes its socket and pid
// file. The TPM's state stays.
func (m *Machine) stopTPM(ctx context.Context) error {
	if err := proc.Stop(ctx, m.TPMPID(), 5*time.Second); err != nil {
		return fmt.Errorf("error stopping the TPM of %s: %w", m.Name, err)
	}

	for _, f := range []string{m.tpmSocket(), m.tpmPIDFile()} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("error removing %s: %w", f, err)
		}
	}

	return nil
}
