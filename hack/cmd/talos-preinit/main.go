// Command talos-preinit is /init of the lab's real Talos initramfs (make talos): Talos'
// own kernel has loop, squashfs, overlay, configfs, virtio and WireGuard built in, a
// Debian kernel has them as modules, and Talos' init loads no modules. So this loads
// every module the initramfs ships (dependencies first, its modules.dep), puts the
// pseudo filesystems it needed back as the kernel left them, and runs Talos' init,
// /init.talos, as PID 1.
package main

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/internal/modules"
)

// talosInit is Talos' init in the initramfs.
const talosInit = "/init.talos"

func main() {
	unmount := mountPseudo()

	logf := kmsgLogger()

	if dir, err := modules.DefaultDir(); err != nil {
		logf("talos-preinit: %v", err)
	} else if loaded, failed, err := loadAll(dir, modules.Finit{}, logf); err != nil {
		logf("talos-preinit: %v", err)
	} else {
		logf("talos-preinit: %d modules loaded, %d failed; running Talos' init", loaded, failed)
	}

	unmount()

	// Talos' init is PID 1 from here; argv[0] is what it expects.
	err := syscall.Exec(talosInit, []string{"/init"}, os.Environ())
	logf("talos-preinit: exec %s: %v", talosInit, err)

	halt()
}

// halt never returns: PID 1 must not exit, or the kernel panics. Not select {}: with no
// other goroutine and no timer, Go's runtime takes that for a deadlock and exits.
func halt() {
	for {
		time.Sleep(time.Hour)
	}
}

// mountPseudo mounts /proc, /sys and /dev where the kernel has not, for the module index
// (uname) and the kernel log; it returns what unmounts them again, since Talos' init
// mounts them itself.
func mountPseudo() func() {
	var mounted []string

	for _, m := range []struct{ fstype, target string }{
		{"proc", "/proc"}, {"sysfs", "/sys"}, {"devtmpfs", "/dev"},
	} {
		if err := unix.Mount(m.fstype, m.target, m.fstype, 0, ""); err == nil {
			mounted = append(mounted, m.target)
		}
	}

	return func() {
		for i := len(mounted) - 1; i >= 0; i-- {
			_ = unix.Unmount(mounted[i], 0)
		}
	}
}

// kmsgLogger writes to the kernel log, which is the console this early.
func kmsgLogger() func(string, ...any) {
	kmsg, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		return func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}

	return func(format string, args ...any) { fmt.Fprintf(kmsg, format+"\n", args...) }
}
