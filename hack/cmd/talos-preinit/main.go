// Command talos-preinit is /init of the lab's real Talos initramfs (make talos): Talos'
// own kernel has loop, squashfs, overlay, configfs, virtio and WireGuard built in, a
// Debian kernel has them as modules, and Talos' init loads no modules. So this loads
// every module the initramfs ships (dependencies first, its modules.dep), puts the
// pseudo filesystems it needed back as the kernel left them, and runs Talos' init,
// /init.talos, as PID 1.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/internal/modules"
)

// talosInit is Talos' init in the initramfs.
const talosInit = "/init.talos"

func main() {
	unmount := mountPseudo()

	logf := kmsgLogger()

	if err := loadAll(logf); err != nil {
		logf("talos-preinit: %v", err)
	}

	unmount()

	// Talos' init is PID 1 from here; argv[0] is what it expects.
	err := syscall.Exec(talosInit, []string{"/init"}, os.Environ())
	logf("talos-preinit: exec %s: %v", talosInit, err)

	select {} // PID 1 must not exit: the kernel would panic without saying why
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

// loadAll loads every module of the running kernel's index in the initramfs, each once,
// its dependencies first. A module that fails is reported and the rest still load:
// Talos says what it then misses.
func loadAll(logf func(string, ...any)) error {
	dir, err := modules.DefaultDir()
	if err != nil {
		return err //nolint:wrapcheck // names uname
	}

	ix, err := modules.Open(dir)
	if err != nil {
		return fmt.Errorf("error reading the modules in %s: %w", dir, err)
	}

	done := map[string]bool{}
	failed := 0

	for m := range ix.Modules() {
		closure, err := ix.Closure(m.Name)
		if err != nil {
			logf("talos-preinit: %s: %v", m.Name, err)

			failed++

			continue
		}

		for _, dep := range closure {
			if done[dep.Name] {
				continue
			}

			done[dep.Name] = true

			if err := (modules.Finit{}).Load(dep); err != nil && !errors.Is(err, unix.EEXIST) {
				logf("talos-preinit: loading %s: %v", filepath.Base(dep.File), err)

				failed++
			}
		}
	}

	logf("talos-preinit: %d modules loaded, %d failed; running Talos' init", len(done)-failed, failed)

	return nil
}
