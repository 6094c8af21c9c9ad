package wipe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/agent/internal/nvme"
)

// Format NVM fields (NVM Express Base Specification 2.0).
const (
	nvmeOACSFormat        = 1 << 1 // Optional Admin Command Support: Format NVM
	nvmeFNAAllNamespaces  = 1 << 0 // Format NVM Attributes: a format applies to every namespace
	nvmeFNAEraseAllNS     = 1 << 1 // a secure erase applies to every namespace
	nvmeFNACryptoSupports = 1 << 2 // cryptographic erase is supported

	nvmeSESUserData = 1
	nvmeSESCrypto   = 2

	nvmeDLFEATReadZeroes = 0x1 // deallocated blocks read as zeroes

	// A user data erase rewrites the whole drive; large, slow drives take hours. The
	// ioctl cannot be cancelled once sent, so the bound is the kernel's, not ctx's.
	nvmeFormatTimeout = 4 * time.Hour
)

// formatCDW10 keeps the namespace's format (LBA format, metadata placement, protection)
// and asks for the erase ses: a secure erase must not change the block size under the
// partitions a next install writes.
func formatCDW10(ns nvme.Namespace, ses uint8) uint32 {
	lbafLow := uint32(ns.FLBAS & 0x0f)
	lbafHigh := uint32(ns.FLBAS>>5) & 0x3
	mset := uint32(ns.FLBAS>>4) & 0x1
	pi := uint32(ns.DPS & 0x7)
	pil := uint32(ns.DPS>>3) & 0x1

	return lbafLow | mset<<4 | pi<<5 | pil<<8 | uint32(ses&0x7)<<9 | lbafHigh<<12
}

// eraseNVMe formats the namespace in its current format with a crypto erase when the
// controller supports one (the media key is replaced, so every block, spare ones too,
// is unreadable at once), else a user data erase.
func eraseNVMe(ctx context.Context, dev nvme.Device, path string) (eraseResult, error) {
	if err := ctx.Err(); err != nil {
		return eraseResult{}, err
	}

	nsid, err := dev.NamespaceID()
	if err != nil {
		return eraseResult{}, fmt.Errorf("error reading the namespace ID of %s: %w", path, err)
	}

	b, err := nvme.Identify(dev, nvme.CNSController, 0)
	if err != nil {
		return eraseResult{}, fmt.Errorf("error identifying the controller of %s: %w", path, err)
	}

	ctrl, err := nvme.ParseIdentifyController(b)
	if err != nil {
		return eraseResult{}, fmt.Errorf("%s: %w", path, err)
	}

	if ctrl.OACS&nvmeOACSFormat == 0 {
		return eraseResult{}, unsupported(path, "controller %q does not support Format NVM", ctrl.Model)
	}

	if b, err = nvme.Identify(dev, nvme.CNSNamespace, nsid); err != nil {
		return eraseResult{}, fmt.Errorf("error identifying namespace %d of %s: %w", nsid, path, err)
	}

	ns, err := nvme.ParseIdentifyNamespace(b)
	if err != nil {
		return eraseResult{}, fmt.Errorf("%s: %w", path, err)
	}

	res := eraseResult{method: "NVMe Format NVM, user data erase"}
	ses := uint8(nvmeSESUserData)

	if ctrl.FNA&nvmeFNACryptoSupports != 0 {
		ses, res.method = nvmeSESCrypto, "NVMe Format NVM, cryptographic erase"
	}

	cmd := &nvme.Command{
		Opcode: nvme.OpFormatNVM, NSID: nsid, CDW10: formatCDW10(ns, ses),
		TimeoutMs: uint32(nvmeFormatTimeout / time.Millisecond),
	}

	if err = dev.Admin(cmd, nil); err != nil {
		var status *nvme.StatusError
		if errors.As(err, &status) && status.Status&0x7ff == 0x02 {
			// Invalid field: the controller refuses this erase setting.
			return eraseResult{}, unsupported(path, "controller %q refused the erase (%v)", ctrl.Model, err)
		}

		return eraseResult{}, fmt.Errorf("error formatting %s: %w", path, err)
	}

	var notes []string

	if ctrl.FNA&(nvmeFNAAllNamespaces|nvmeFNAEraseAllNS) != 0 {
		notes = append(notes, "the controller erases all its namespaces together")
	}

	// A user data erase leaves "indeterminate" contents by the specification; zeroes are
	// promised only where deallocated blocks read as zeroes and the drive deallocates.
	// The samples still have to show the data gone.
	if ns.DLFEAT&0x7 == nvmeDLFEATReadZeroes {
		notes = append(notes, "deallocated blocks read as zeroes on this namespace")
	}

	res.note = strings.Join(notes, "; ")

	return res, nil
}
