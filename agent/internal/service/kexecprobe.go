package service

import (
	"errors"

	"golang.org/x/sys/unix"
)

// kexecFileUnavailable says why this kernel cannot kexec_file_load, "" when it can.
// Debian's arm64 kernel has no CONFIG_KEXEC_FILE: told at registration, the provider
// boots Talos by the firmware instead of ordering a kexec that fails. The probe is an
// unload, which changes nothing for an agent that loaded no kernel (it runs at start).
func kexecFileUnavailable() string {
	if err := unix.KexecFileLoad(-1, -1, "", unix.KEXEC_FILE_UNLOAD); errors.Is(err, unix.ENOSYS) {
		return "the kernel has no kexec_file_load (CONFIG_KEXEC_FILE)"
	}

	return ""
}
