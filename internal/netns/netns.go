// Package netns creates, enters and removes named network namespaces, and the links in
// them (links.go), for the lab and the benchmarks. A namespace is named as iproute2
// names it, a bind mount at /run/netns/<name>, so "ip netns" sees the same namespaces
// and Command runs programs in them with "ip netns exec".
package netns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// RunDir holds the named namespaces, as iproute2 keeps them.
const RunDir = "/run/netns"

// Path is where the namespace name is mounted.
func Path(name string) string { return filepath.Join(RunDir, name) }

// checkName refuses a name that is no file name of its own under RunDir.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 255 {
		return fmt.Errorf("%q is not a network namespace name", name)
	}

	return nil
}

// Exists reports whether name is a network namespace: a file under RunDir that a
// namespace is mounted on (a file left by a crash between the two is none).
func Exists(name string) bool {
	if checkName(name) != nil {
		return false
	}

	var st unix.Statfs_t

	return unix.Statfs(Path(name), &st) == nil && st.Type == unix.NSFS_MAGIC
}

// Create creates the network namespace name, with only its loopback link (down); an
// existing one is kept.
func Create(name string) error {
	if err := checkName(name); err != nil {
		return err
	}

	if Exists(name) {
		return nil
	}

	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", RunDir, err)
	}

	if err := shareRunDir(); err != nil {
		return err
	}

	path := Path(name)

	// A file without a namespace on it is what a crash left: start again.
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("error removing the stale %s: %w", path, err)
	}

	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0)
	if err != nil {
		return fmt.Errorf("error creating the mount point of namespace %s: %w", name, err)
	}

	if err := f.Close(); err != nil {
		return fmt.Errorf("error creating the mount point of namespace %s: %w", name, err)
	}

	err = onThreadOfItsOwn(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("error creating a network namespace: %w", err)
		}

		// The mount keeps the namespace after the thread is gone.
		if err := unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("error mounting the namespace on %s: %w", path, err)
		}

		return nil
	})
	if err != nil {
		os.Remove(path) // best effort: the error that matters is err

		return fmt.Errorf("error creating network namespace %s: %w", name, err)
	}

	return nil
}

// shareRunDir makes RunDir a shared mount, as "ip netns add" does, so that a namespace
// mounted or unmounted here is seen in every mount namespace ("ip netns exec" makes one
// per command) and the other way round.
func shareRunDir() error {
	err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}

	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("error making %s a shared mount: %w", RunDir, err)
	}

	// EINVAL: RunDir is no mount point yet; make it one, then share it.
	if err := unix.Mount(RunDir, RunDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("error bind-mounting %s on itself: %w", RunDir, err)
	}

	if err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("error making %s a shared mount: %w", RunDir, err)
	}

	return nil
}

// Delete removes the namespace name; one that does not exist is already removed. The
// kernel destroys the namespace, and with it its virtual links (veths, bridges, taps),
// once no process runs in it: stop those first (see PIDs).
func Delete(name string) error {
	if err := checkName(name); err != nil {
		return err
	}

	path := Path(name)

	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}

	// EINVAL: nothing mounted there (a file left by a crash).
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("error unmounting network namespace %s: %w", name, err)
	}

	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("error removing network namespace %s: %w", name, err)
	}

	return nil
}

// List lists the named network namespaces, sorted.
func List() ([]string, error) {
	entries, err := os.ReadDir(RunDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}

	if err != nil {
		return nil, fmt.Errorf("error listing network namespaces: %w", err)
	}

	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}

	slices.Sort(names)

	return names, nil
}

// PIDs lists the processes that run in namespace name (none when it does not exist).
func PIDs(name string) ([]int, error) {
	if !Exists(name) {
		return nil, nil
	}

	var want unix.Stat_t
	if err := unix.Stat(Path(name), &want); err != nil {
		return nil, fmt.Errorf("error reading network namespace %s: %w", name, err)
	}

	entries, _ := filepath.Glob("/proc/[0-9]*/ns/net") // a constant, valid pattern

	var pids []int

	for _, e := range entries {
		var st unix.Stat_t
		if unix.Stat(e, &st) != nil {
			continue // gone meanwhile, or a kernel thread
		}

		if st.Dev == want.Dev && st.Ino == want.Ino {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(e)))); err == nil {
				pids = append(pids, pid)
			}
		}
	}

	return pids, nil
}

// Argv is argv run in namespace ns, through "ip netns exec", which execs the program
// (its pid is the program's) and mounts a sysfs of the namespace for it, so programs
// that read /sys/class/net see the namespace's links. An empty ns leaves argv as is:
// the caller's namespace.
func Argv(ns string, argv ...string) []string {
	if ns == "" {
		return argv
	}

	return append([]string{"ip", "netns", "exec", ns}, argv...)
}

// Command is the command name with args in namespace ns ("" for the caller's); see
// Argv. The command is killed when ctx ends: for a daemon, give it
// context.WithoutCancel.
func Command(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	argv := Argv(ns, append([]string{name}, args...)...)

	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// Do runs fn on an OS thread inside namespace name: sockets fn opens, and files it reads
// under /proc/thread-self/net, are the namespace's. Goroutines fn starts run elsewhere,
// in the process's namespace.
func Do(name string, fn func() error) error {
	if !Exists(name) {
		return fmt.Errorf("no network namespace %q", name)
	}

	f, err := os.Open(Path(name))
	if err != nil {
		return fmt.Errorf("error opening network namespace %s: %w", name, err)
	}

	defer f.Close()

	return onThreadOfItsOwn(func() error {
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("error entering network namespace %s: %w", name, err)
		}

		return fn()
	})
}

// onThreadOfItsOwn runs fn on an OS thread locked to it: fn may move the thread into
// another network namespace. The thread then goes back to its own namespace before any
// other goroutine may run on it; should that fail, it stays locked and the runtime ends
// it with the goroutine. Either way no thread is left in fn's namespace, which a thread
// would keep alive after Delete.
func onThreadOfItsOwn(fn func() error) error {
	errc := make(chan error, 1)

	go func() {
		runtime.LockOSThread()

		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- fmt.Errorf("error opening the thread's network namespace: %w", err)

			return
		}

		defer own.Close()

		err = fn()

		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}

		errc <- err
	}()

	return <-errc
}
