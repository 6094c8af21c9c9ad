package boot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// AgentAssetSet is one architecture's agent boot assets, in the layout of Talos
// boot-asset bundles: vmlinuz-<arch>, initramfs-<arch>.xz (or .zst), cmdline-<arch>; and
// uki-stub-<arch>.efi when the imager was given a UKI stub.
type AgentAssetSet struct {
	Kernel    string
	Initramfs string
	Cmdline   string
	// UKIStub is the systemd-boot stub each machine's Unified Kernel Image is built on
	// (for UEFI HTTP boot with no iPXE: arm64), read once at load; nil when there is none.
	UKIStub []byte
}

// AgentAssets are the agent boot assets found in a directory.
type AgentAssets struct {
	Dir  string
	sets map[string]AgentAssetSet
}

// LoadAgentAssets looks for agent boot assets in dir. A missing directory or architecture
// is not an error: the provider then tells machines to wait.
func LoadAgentAssets(dir string) (*AgentAssets, error) {
	a := &AgentAssets{Dir: dir, sets: map[string]AgentAssetSet{}}

	for _, arch := range []string{"amd64", "arm64"} {
		set := AgentAssetSet{Kernel: "vmlinuz-" + arch}
		if !exists(filepath.Join(dir, set.Kernel)) {
			continue
		}

		for _, ext := range []string{".xz", ".zst"} {
			if name := "initramfs-" + arch + ext; exists(filepath.Join(dir, name)) {
				set.Initramfs = name

				break
			}
		}

		if set.Initramfs == "" {
			continue
		}

		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline-"+arch))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("error reading agent cmdline for %s: %w", arch, err)
		}

		set.Cmdline = strings.Join(strings.Fields(string(cmdline)), " ")

		if path := filepath.Join(dir, "uki-stub-"+arch+".efi"); exists(path) {
			if set.UKIStub, err = os.ReadFile(path); err != nil {
				return nil, fmt.Errorf("error reading the UKI stub for %s: %w", arch, err)
			}
		}

		a.sets[arch] = set
	}

	return a, nil
}

// For returns the asset set for an architecture.
func (a *AgentAssets) For(arch string) (AgentAssetSet, bool) {
	if a == nil {
		return AgentAssetSet{}, false
	}

	set, ok := a.sets[arch]

	return set, ok
}

// Has reports whether name is one of the asset files, so only those are served.
func (a *AgentAssets) Has(name string) bool {
	if a == nil {
		return false
	}

	for _, set := range a.sets {
		if name == set.Kernel || name == set.Initramfs {
			return true
		}
	}

	return false
}

func exists(path string) bool {
	st, err := os.Stat(path)

	return err == nil && st.Mode().IsRegular()
}
