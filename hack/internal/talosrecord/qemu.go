package talosrecord

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// vm is one QEMU process of the recorded machine: TCG, two CPUs, 2 GiB, user-mode
// networking with the guest's API port forwarded to 127.0.0.1, the machine's disk, its
// serial console to a file. -no-reboot: a reboot ends the process, so that a machine
// booted from the network kernel boots its disk next (the recorder starts QEMU again
// without a kernel); a kexec stays in it.
type vm struct {
	cmd     *exec.Cmd
	console string
	done    chan struct{}
	err     error
}

// vmSpec is what every QEMU process of the machine shares.
type vmSpec struct {
	qemu    string
	disk    string
	apiPort int
	log     *os.File
}

// start starts QEMU with the console at console; kernel, initrd and cmdline boot those
// (the network boot), empty boots the disk.
func (s vmSpec) start(console, kernel, initrd, cmdline string) (*vm, error) {
	args := []string{
		"-accel", "tcg", "-cpu", "max", "-smp", "2", "-m", "2048",
		"-netdev", "user,id=n0,hostfwd=tcp:127.0.0.1:" + strconv.Itoa(s.apiPort) + "-:50000",
		"-device", "virtio-net-pci,netdev=n0",
		"-drive", "file=" + s.disk + ",format=raw,if=virtio",
		"-display", "none", "-monitor", "none", "-serial", "file:" + console, "-no-reboot",
	}

	if kernel != "" {
		args = append(args, "-kernel", kernel, "-initrd", initrd, "-append", cmdline)
	}

	cmd := exec.Command(s.qemu, args...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	// Its own process group, and killed with the recorder should the recorder die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("error starting QEMU: %w", err)
	}

	v := &vm{cmd: cmd, console: console, done: make(chan struct{})}

	go func() {
		v.err = cmd.Wait()
		close(v.done)
	}()

	return v, nil
}

// exited says whether QEMU has ended.
func (v *vm) exited() bool {
	select {
	case <-v.done:
		return true
	default:
		return false
	}
}

// stop kills QEMU and waits for it.
func (v *vm) stop() {
	if v == nil || v.exited() {
		return
	}

	_ = v.cmd.Process.Kill() // it may have ended since
	<-v.done
}

// kernelStarts counts the kernel's banners on the console: one per boot, a kexec's
// included.
func (v *vm) kernelStarts() int {
	b, err := os.ReadFile(v.console)
	if err != nil {
		return 0
	}

	return strings.Count(string(b), "Linux version ")
}

// tail is the console's last n lines.
func (v *vm) tail(n int) string {
	b, err := os.ReadFile(v.console)
	if err != nil {
		return err.Error()
	}

	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}

	return strings.Join(lines, "\n")
}
