package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/u-root/u-root/pkg/boot/kexec"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/agent/internal/bmc"
	"github.com/anvil-metal/anvil/agent/internal/inventory"
	"github.com/anvil-metal/anvil/agent/internal/members"
	"github.com/anvil-metal/anvil/agent/internal/wipe"
	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/disksel"
	"github.com/anvil-metal/anvil/internal/initsys"
)

// maxBootFile bounds a kexec download.
const maxBootFile = 1 << 30

// machineActions are the orders' effects on this machine.
type machineActions struct {
	logger    *zap.Logger
	sysfsRoot string
	devRoot   string
	// dryRun logs power and kexec actions instead of doing them: for runs outside an
	// initramfs, where rebooting the host would be a surprise.
	dryRun bool
	tmpDir string
	// mountinfo is read to find the disk the agent booted from (mountinfoPath when empty).
	mountinfo string
}

func (a *machineActions) Reboot(context.Context) error {
	if a.dryRun {
		a.logger.Info("dry run: would reboot")

		return nil
	}

	return initsys.Reboot()
}

func (a *machineActions) PowerOff(context.Context) error {
	if a.dryRun {
		a.logger.Info("dry run: would power off")

		return nil
	}

	return initsys.PowerOff()
}

// LoadKexec downloads the next kernel and initramfs, checks each against its digest,
// and loads them with the cmdline (kexec_file_load): the kernel checks the image itself,
// which the older kexec_load would leave to us.
func (a *machineActions) LoadKexec(ctx context.Context, k *agentv1.Kexec) error {
	start := time.Now()

	// Both at once: each download is checked as it arrives, and the two share the wait.
	var (
		kernel, initramfs       *os.File
		kernelErr, initramfsErr error
		wg                      sync.WaitGroup
	)

	wg.Go(func() { kernel, kernelErr = a.download(ctx, k.GetKernelUrl(), k.GetKernelSha256(), "kernel") })
	wg.Go(func() {
		initramfs, initramfsErr = a.download(ctx, k.GetInitramfsUrl(), k.GetInitramfsSha256(), "initramfs")
	})
	wg.Wait()

	for _, f := range []*os.File{kernel, initramfs} {
		if f != nil {
			defer f.Close()
		}
	}

	if err := errors.Join(kernelErr, initramfsErr); err != nil {
		return err
	}

	downloaded := time.Now()
	a.logger.Info("next kernel downloaded and checked", zap.String("kernel", k.GetKernelUrl()), zap.Duration("took", downloaded.Sub(start)))

	if a.dryRun {
		a.logger.Info("dry run: would load the next kernel", zap.String("kernel", k.GetKernelUrl()))

		return nil
	}

	if err := kexec.FileLoad(kernel, initramfs, k.GetCmdline()); err != nil {
		// u-root's error quotes the cmdline, which carries the metadata token: only the
		// kernel's answer is said.
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return fmt.Errorf("error loading the next kernel: kexec_file_load: %w", errno)
		}

		return errors.New("error loading the next kernel: kexec_file_load failed")
	}

	// Not the cmdline: it carries the metadata token.
	a.logger.Info("next kernel loaded", zap.String("kernel", k.GetKernelUrl()), zap.Duration("took", time.Since(downloaded)))

	return nil
}

// JumpKexec boots the loaded kernel.
func (a *machineActions) JumpKexec(context.Context) error {
	if a.dryRun {
		a.logger.Info("dry run: would kexec")

		return nil
	}

	return kexec.Reboot()
}

// download fetches url into an unlinked temporary file, checking it against want (the
// SHA-256 in hex) when given.
func (a *machineActions) download(ctx context.Context, url, want, name string) (*os.File, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("invalid %s URL: %w", name, err)
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("error downloading the %s: %w", name, err)
	}

	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("error downloading the %s: %s", name, resp.Status)
	}

	f, err := os.CreateTemp(a.tmpDir, name)
	if err != nil {
		return nil, err
	}

	// Gone once closed: the reader opened below keeps it while the kernel reads it.
	defer os.Remove(f.Name())

	h := sha256.New()

	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, maxBootFile+1))
	if err == nil && n > maxBootFile {
		err = fmt.Errorf("larger than %d bytes", maxBootFile)
	}

	if err == nil && want != "" {
		if got := hex.EncodeToString(h.Sum(nil)); got != strings.ToLower(want) {
			err = fmt.Errorf("its SHA-256 is %s, not %s", got, want)
		}
	}

	if cerr := f.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		return nil, fmt.Errorf("error downloading the %s: %w", name, err)
	}

	// Read-only, with no writer left: kexec_file_load refuses a file open for writing
	// (ETXTBSY).
	return os.Open(f.Name())
}

// mountinfoPath tells BootDisks what the agent runs from.
const mountinfoPath = "/proc/self/mountinfo"

// Wipe wipes the disks wipe.Plan says to, and reports why it left the others alone.
func (a *machineActions) Wipe(ctx context.Context, w *agentv1.Wipe) (*agentv1.WipeReport, error) {
	mode, err := wipeMode(w.GetMode())
	if err != nil {
		return nil, err
	}

	found, err := inventory.SysBlockDisks(ctx, a.logger, a.sysfsRoot, a.devRoot)
	if err != nil {
		return nil, fmt.Errorf("error listing disks: %w", err)
	}

	// Not knowing what the agent booted from is reason enough not to wipe anything.
	bootDisks, err := a.bootDisks()
	if err != nil {
		return nil, fmt.Errorf("error finding the disk the agent booted from: %w", err)
	}

	order, err := wipeOrder(w, mode, bootDisks)
	if err != nil {
		return nil, err
	}

	disks := make([]wipe.Disk, 0, len(found))
	sizes := make(map[string]uint64, len(found))

	for _, d := range found {
		disk := wipe.Disk{Disk: disksel.Disk{
			Name: d.ID, Size: d.Spec.Size, CDROM: d.Spec.CDROM, Readonly: d.Spec.Readonly, Transport: d.Spec.Transport,
			Model: d.Spec.Model, Serial: d.Spec.Serial, WWID: d.Spec.WWID, BusPath: d.Spec.BusPath, Rotational: d.Spec.Rotational,
		}}

		if removable, why := wipe.Removable(a.sysfsRoot, d.ID, d.Spec.Transport); removable {
			disk.Removable = why
		}

		if d.Spec.Size > 0 && !d.Spec.CDROM {
			// What md arrays it belongs to decides whether a scope may keep it alone.
			// Unreadable, it matters only where the scope keeps disks.
			if disk.Members, err = members.Read(filepath.Join(a.devRoot, d.ID)); err != nil {
				if order.Scope != wipe.ScopeAll {
					return nil, err
				}

				a.logger.Warn("error reading a disk's RAID and LVM signatures", zap.String("disk", d.ID), zap.Error(err))
			}
		}

		disks = append(disks, disk)
		sizes[d.ID] = d.Spec.Size
	}

	steps, err := wipe.Plan(disks, order)
	if err != nil {
		return nil, fmt.Errorf("error planning the wipe: %w", err)
	}

	report := &agentv1.WipeReport{GenerationId: w.GetGenerationId()}

	var errs []error

	for _, step := range steps {
		if step.Skip != "" {
			a.logger.Info("not wiping disk", zap.String("disk", step.Disk), zap.String("reason", step.Skip))
			report.Disks = append(report.Disks, &agentv1.DiskWipe{Device: step.Disk, Skipped: step.Skip, Kept: step.Kept})

			continue
		}

		r, err := a.wipeDisk(ctx, step, sizes[step.Disk])
		if err != nil {
			errs = append(errs, err)

			continue
		}

		report.Disks = append(report.Disks, &agentv1.DiskWipe{
			Device: step.Disk, Method: r.Method, Bytes: r.Bytes, DurationMs: uint64(r.Duration.Milliseconds()), Verified: r.Verified, //nolint:gosec // a measured duration: not negative
		})
	}

	// A wipe that failed on any disk is not done: the provider orders it again.
	if err = errors.Join(errs...); err != nil {
		return nil, err
	}

	return report, nil
}

// wipeScopes are the wipe package's names for the order's scopes.
var wipeScopes = map[agentv1.Wipe_Scope]wipe.Scope{
	agentv1.Wipe_SCOPE_ALL:          wipe.ScopeAll,
	agentv1.Wipe_SCOPE_INSTALL_DISK: wipe.ScopeInstallDisk,
	agentv1.Wipe_SCOPE_ALL_EXCEPT:   wipe.ScopeAllExcept,
}

// wipeOrder is the plan's order for the provider's: a scope this agent does not know, or
// a selector it cannot read, is refused rather than read as "all".
func wipeOrder(w *agentv1.Wipe, mode wipe.Mode, bootDisks map[string]bool) (wipe.Order, error) {
	scope, ok := wipeScopes[w.GetScope()]
	if !ok {
		return wipe.Order{}, fmt.Errorf("wipe scope %s is not supported by this agent", w.GetScope())
	}

	sel, err := disksel.Parse(w.GetSelector())
	if err != nil {
		return wipe.Order{}, fmt.Errorf("error reading the wipe's disk selector: %w", err)
	}

	return wipe.Order{Mode: mode, IncludeRemovable: w.GetIncludeRemovable(), BootDisks: bootDisks, Scope: scope, Select: sel}, nil
}

// wipeMode is the wipe package's name for the order's mode.
func wipeMode(m agentv1.Wipe_Mode) (wipe.Mode, error) {
	switch m {
	case agentv1.Wipe_MODE_FAST:
		return wipe.ModeFast, nil
	case agentv1.Wipe_MODE_ZEROES:
		return wipe.ModeZeroes, nil
	case agentv1.Wipe_MODE_SECURE_ERASE:
		return wipe.ModeSecureErase, nil
	default:
		return "", fmt.Errorf("wipe mode %s is not supported by this agent", m)
	}
}

// wipeDisk wipes one disk as planned: in the step's mode, or in its fallback where the
// drive cannot do a secure erase, saying why in the method.
func (a *machineActions) wipeDisk(ctx context.Context, step wipe.Step, size uint64) (wipe.Report, error) {
	path := filepath.Join(a.devRoot, step.Disk)
	progress := func(dev string, done, total uint64) {
		a.logger.Info("wipe progress", zap.String("disk", dev), zap.Uint64("done", done), zap.Uint64("total", total))
	}

	a.logger.Info("wiping disk", zap.String("disk", step.Disk), zap.String("mode", string(step.Mode)), zap.Uint64("size", size))

	r, err := wipe.Device(ctx, path, step.Mode, progress)
	if step.Fallback == "" || !errors.Is(err, wipe.ErrSecureEraseUnsupported) {
		return r, err
	}

	a.logger.Warn("secure erase not supported, wiping in the fallback mode instead", zap.String("disk", step.Disk),
		zap.String("mode", string(step.Fallback)), zap.Error(err))

	r, ferr := wipe.Device(ctx, path, step.Fallback, progress)
	if ferr != nil {
		return r, ferr
	}

	r.Method += " (" + err.Error() + ")"

	return r, nil
}

func (a *machineActions) bootDisks() (map[string]bool, error) {
	path := a.mountinfo
	if path == "" {
		path = mountinfoPath
	}

	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}

	defer f.Close()

	return wipe.BootDisks(a.sysfsRoot, f)
}

// GetBMC reports where the BMC listens, read through the local IPMI interface.
func (a *machineActions) GetBMC(ctx context.Context) (*agentv1.BMCInfo, error) {
	info, err := bmc.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("error reading the BMC: %w", err)
	}

	a.logger.Info("BMC read", zap.String("address", info.Address), zap.Uint16("port", info.Port),
		zap.Uint8("channel", info.Channel), zap.String("ip_source", info.IPSource))

	return &agentv1.BMCInfo{Address: info.Address, Port: uint32(info.Port)}, nil
}

// SetBMC provisions the provider's BMC user. The reply leaves the password out: the
// provider chose it.
func (a *machineActions) SetBMC(ctx context.Context, s *agentv1.SetBMC) (*agentv1.BMCInfo, error) {
	info, err := bmc.Provision(ctx, s.GetUser(), s.GetPassword())
	if err != nil {
		return nil, fmt.Errorf("error provisioning the BMC user: %w", err)
	}

	a.logger.Info("BMC user provisioned", zap.String("user", info.User), zap.Uint8("user_id", info.UserID),
		zap.String("address", info.Address), zap.Uint16("port", info.Port), zap.Uint8("channel", info.Channel))

	return &agentv1.BMCInfo{Address: info.Address, Port: uint32(info.Port), User: info.User}, nil
}
