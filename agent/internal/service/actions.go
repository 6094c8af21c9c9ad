package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/u-root/u-root/pkg/boot/kexec"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/agent/internal/bmc"
	"github.com/anvil-metal/anvil/agent/internal/inventory"
	"github.com/anvil-metal/anvil/agent/internal/wipe"
	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
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

func (a *machineActions) Kexec(ctx context.Context, k *agentv1.Kexec) error {
	kernel, err := a.download(ctx, k.GetKernelUrl(), "kernel")
	if err != nil {
		return err
	}

	defer kernel.Close()

	initramfs, err := a.download(ctx, k.GetInitramfsUrl(), "initramfs")
	if err != nil {
		return err
	}

	defer initramfs.Close()

	if a.dryRun {
		a.logger.Info("dry run: would kexec", zap.String("kernel", k.GetKernelUrl()))

		return nil
	}

	if err = kexec.FileLoad(kernel, initramfs, k.GetCmdline()); err != nil {
		return fmt.Errorf("error loading the next kernel: %w", err)
	}

	return kexec.Reboot()
}

func (a *machineActions) download(ctx context.Context, url, name string) (*os.File, error) {
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

	os.Remove(f.Name()) // kept open, gone when closed

	if _, err = io.Copy(f, io.LimitReader(resp.Body, maxBootFile)); err != nil {
		f.Close()

		return nil, fmt.Errorf("error downloading the %s: %w", name, err)
	}

	if _, err = f.Seek(0, io.SeekStart); err != nil {
		f.Close()

		return nil, err
	}

	return f, nil
}

// mountinfoPath tells BootDisks what the agent runs from.
const mountinfoPath = "/proc/self/mountinfo"

// Wipe wipes every disk that can hold a tenant's data: not read-only media, not CD-ROMs,
// not the disk the agent booted from, and not removable media unless the order says so.
// A secure erase a disk cannot do falls back to zeroes, the strongest wipe left, and
// the report's method says so: a wipe the provider can never see done would hold the
// machine forever.
func (a *machineActions) Wipe(ctx context.Context, w *agentv1.Wipe) (*agentv1.WipeReport, error) {
	var mode wipe.Mode

	switch w.GetMode() {
	case agentv1.Wipe_MODE_FAST:
		mode = wipe.ModeFast
	case agentv1.Wipe_MODE_ZEROES:
		mode = wipe.ModeZeroes
	case agentv1.Wipe_MODE_SECURE_ERASE:
		mode = wipe.ModeSecureErase
	default:
		return nil, fmt.Errorf("wipe mode %s is not supported by this agent", w.GetMode())
	}

	disks, err := inventory.SysBlockDisks(ctx, a.logger, a.sysfsRoot, a.devRoot)
	if err != nil {
		return nil, fmt.Errorf("error listing disks: %w", err)
	}

	// Not knowing what the agent booted from is reason enough not to wipe anything.
	bootDisks, err := a.bootDisks()
	if err != nil {
		return nil, fmt.Errorf("error finding the disk the agent booted from: %w", err)
	}

	report := &agentv1.WipeReport{GenerationId: w.GetGenerationId()}

	var errs []error

	for _, d := range disks {
		entry := &agentv1.DiskWipe{Device: d.ID}
		removable, why := wipe.Removable(a.sysfsRoot, d.ID, d.Spec.Transport)

		switch {
		case d.Spec.CDROM:
			entry.Skipped = "CD-ROM"
		case d.Spec.Readonly:
			entry.Skipped = "read-only"
		case d.Spec.Size == 0:
			entry.Skipped = "no medium"
		case bootDisks[d.ID]:
			entry.Skipped = wipe.SkipBootDisk
		case removable && !w.GetIncludeRemovable():
			entry.Skipped = wipe.SkipRemovable + " (" + why + ")"
		}

		if entry.Skipped != "" {
			a.logger.Info("not wiping disk", zap.String("disk", d.ID), zap.String("reason", entry.Skipped))
			report.Disks = append(report.Disks, entry)

			continue
		}

		r, err := a.wipeDisk(ctx, d, mode)
		if err != nil {
			errs = append(errs, err)

			continue
		}

		entry.Method, entry.Bytes, entry.DurationMs, entry.Verified = r.Method, r.Bytes, uint64(r.Duration.Milliseconds()), r.Verified //nolint:gosec // a measured duration: not negative
		report.Disks = append(report.Disks, entry)
	}

	// A wipe that failed on any disk is not done: the provider orders it again.
	if err = errors.Join(errs...); err != nil {
		return nil, err
	}

	return report, nil
}

func (a *machineActions) wipeDisk(ctx context.Context, d inventory.Disk, mode wipe.Mode) (wipe.Report, error) {
	path := filepath.Join(a.devRoot, d.ID)
	progress := func(dev string, done, total uint64) {
		a.logger.Info("wipe progress", zap.String("disk", dev), zap.Uint64("done", done), zap.Uint64("total", total))
	}

	a.logger.Info("wiping disk", zap.String("disk", d.ID), zap.String("mode", string(mode)), zap.Uint64("size", d.Spec.Size))

	r, err := wipe.Device(ctx, path, mode, progress)
	if mode != wipe.ModeSecureErase || !errors.Is(err, wipe.ErrSecureEraseUnsupported) {
		return r, err
	}

	a.logger.Warn("secure erase not supported, writing zeroes instead", zap.String("disk", d.ID), zap.Error(err))

	r, zerr := wipe.Device(ctx, path, wipe.ModeZeroes, progress)
	if zerr != nil {
		return r, zerr
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
