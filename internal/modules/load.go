package modules

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// DefaultDir returns /lib/modules/<running kernel release>.
func DefaultDir() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}

	return filepath.Join("/lib/modules", unix.ByteSliceToString(u.Release[:])), nil
}

// Always are the modules the agent wants whatever the hardware: local IPMI
// (no PCI modalias matches a BMC's KCS interface reliably) and the tunnels
// SideroLink needs.
var Always = []string{"ipmi_msghandler", "ipmi_devintf", "ipmi_si", "tun", "wireguard"}

// Options configure Load.
type Options struct {
	Index *Index
	// Devices is the sysfs devices tree to scan; "" means /sys/devices.
	Devices string
	// Always are loaded whether or not hardware asks for them.
	Always []string
	// Skip are never loaded, even when matched.
	Skip []string
	// Loader inserts modules; nil means Finit.
	Loader Loader
	Logger *zap.Logger
	// MaxRounds bounds the rescans: loading a bus driver (virtio_pci)
	// creates devices (virtio:d00000001…) that want further modules.
	// 0 means 5.
	MaxRounds int
}

// Result reports what Load did.
type Result struct {
	Loaded   []Loaded
	Already  []string // already in the kernel (EEXIST)
	Failed   []Failure
	Rounds   int
	Duration time.Duration
}

// Loaded is one module inserted by Load.
type Loaded struct {
	Name     string
	Took     time.Duration
	Round    int
	WantedBy string // the modalias or "always" that asked for it
}

// Failure is a module Load could not insert; the boot goes on without it.
type Failure struct {
	Name string
	Err  error
}

// Load inserts the modules the hardware under Devices asks for, plus
// Always, dependencies first and each once, rescanning until a round loads
// nothing new. A module that fails is recorded and the rest still load;
// Load returns an error only when it cannot scan sysfs or ctx ends.
func Load(ctx context.Context, opts Options) (Result, error) {
	start := time.Now()

	if opts.Index == nil {
		return Result{}, errors.New("modules: no index")
	}

	if opts.Devices == "" {
		opts.Devices = "/sys/devices"
	}

	if opts.Loader == nil {
		opts.Loader = Finit{}
	}

	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}

	if opts.MaxRounds <= 0 {
		opts.MaxRounds = 5
	}

	l := &loadRun{opts: opts, attempted: map[string]bool{}, failed: map[string]bool{}, skip: map[string]bool{}}
	for _, s := range opts.Skip {
		l.skip[Name(s)] = true
	}

	var err error

	for round := 1; round <= opts.MaxRounds; round++ {
		if err = ctx.Err(); err != nil {
			break
		}

		l.res.Rounds = round

		var aliases []string

		aliases, err = Modaliases(opts.Devices)
		if err != nil {
			break
		}

		type want struct{ name, by string }

		var wants []want

		if round == 1 {
			for _, n := range opts.Always {
				wants = append(wants, want{Name(n), "always"})
			}
		}

		for _, a := range aliases {
			for _, n := range opts.Index.Match(a) {
				wants = append(wants, want{n, a})
			}
		}

		tried := 0

		for _, w := range wants {
			if ctx.Err() != nil {
				break
			}

			tried += l.want(w.name, w.by, round)
		}

		if tried == 0 {
			break
		}
	}

	l.res.Duration = time.Since(start)
	opts.Logger.Info("kernel modules loaded",
		zap.Int("loaded", len(l.res.Loaded)),
		zap.Int("already", len(l.res.Already)),
		zap.Int("failed", len(l.res.Failed)),
		zap.Int("rounds", l.res.Rounds),
		zap.Duration("took", l.res.Duration))

	if err != nil {
		return l.res, fmt.Errorf("loading kernel modules: %w", err)
	}

	return l.res, nil
}

type loadRun struct {
	opts      Options
	attempted map[string]bool
	failed    map[string]bool
	skip      map[string]bool
	res       Result
}

// want loads name and its dependencies unless already attempted, and
// returns how many modules it attempted.
func (l *loadRun) want(name, by string, round int) int {
	if l.attempted[name] || l.skip[name] || l.opts.Index.Builtin(name) {
		return 0
	}

	log := l.opts.Logger

	closure, err := l.opts.Index.Closure(name)
	if err != nil {
		l.attempted[name] = true
		l.res.Failed = append(l.res.Failed, Failure{Name: name, Err: err})
		log.Warn("kernel module not available", zap.String("module", name), zap.String("for", by), zap.Error(err))

		return 1
	}

	tried := 0

	for _, m := range closure {
		if l.attempted[m.Name] {
			if l.failed[m.Name] && m.Name != name {
				l.attempted[name] = true
				l.fail(name, by, fmt.Errorf("dependency %s failed", m.Name))

				return tried + 1
			}

			continue
		}

		l.attempted[m.Name] = true
		tried++

		if l.skip[m.Name] {
			l.fail(m.Name, by, errors.New("needs a skipped module"))

			return tried
		}

		t := time.Now()
		err := l.opts.Loader.Load(m)
		took := time.Since(t)

		switch {
		case err == nil:
			l.res.Loaded = append(l.res.Loaded, Loaded{Name: m.Name, Took: took, Round: round, WantedBy: by})
			log.Info("loaded kernel module", zap.String("module", m.Name), zap.String("for", by), zap.Duration("took", took))
		case errors.Is(err, unix.EEXIST):
			l.res.Already = append(l.res.Already, m.Name)
		default:
			l.fail(m.Name, by, err)
			// What depends on it cannot load; the rest of the closure is
			// left for another device to retry next round.
			if m.Name != name {
				l.attempted[name] = true
				l.fail(name, by, fmt.Errorf("dependency %s failed", m.Name))
			}

			return tried
		}
	}

	return tried
}

func (l *loadRun) fail(name, by string, err error) {
	l.failed[name] = true
	l.res.Failed = append(l.res.Failed, Failure{Name: name, Err: err})
	l.opts.Logger.Warn("kernel module failed to load", zap.String("module", name), zap.String("for", by), zap.Error(err))
}
