package kmod

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/anvil-metal/anvil/internal/modules"
)

// Firmware returns the firmware files the selected modules ask for (their modinfo
// "firmware=" keys, as `modinfo -F firmware` prints them), sorted and unique, with the
// modules asking for each.
func (s *Selection) Firmware() (map[string][]string, error) {
	wanted := map[string][]string{}

	for _, name := range s.Names {
		m, _ := s.Index.Module(name)

		data, err := modules.ReadDecompressed(m.File)
		if err != nil {
			return nil, err
		}

		info, err := Modinfo(data)
		if err != nil {
			return nil, fmt.Errorf("error reading modinfo of %s: %w", m.Path, err)
		}

		for _, fw := range info["firmware"] {
			wanted[fw] = append(wanted[fw], name)
		}
	}

	return wanted, nil
}

// Modinfo parses the .modinfo section of a module's ELF image: NUL-separated key=value
// pairs; a key may repeat (firmware, alias, depends...).
func Modinfo(ko []byte) (map[string][]string, error) {
	f, err := elf.NewFile(bytes.NewReader(ko))
	if err != nil {
		return nil, fmt.Errorf("error parsing ELF: %w", err)
	}

	sec := f.Section(".modinfo")
	if sec == nil {
		return map[string][]string{}, nil
	}

	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("error reading .modinfo: %w", err)
	}

	info := map[string][]string{}

	for _, kv := range bytes.Split(data, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if ok {
			info[k] = append(info[k], v)
		}
	}

	return info, nil
}

// FirmwareFiles looks the wanted firmware up in dir (a tree laid out like /lib/firmware).
// A name found only compressed (name.xz, name.zst) is decompressed, so the kernel finds
// it whatever its CONFIG_FW_LOADER_COMPRESS_* says. Symlinks are followed and shipped as
// files. Names not found are returned as missing: drivers work without most of them (or
// the hardware is absent), so the caller warns rather than fails.
func FirmwareFiles(dir string, wanted []string) (found []File, missing []string, err error) {
	sort.Strings(wanted)

	for _, name := range wanted {
		clean := filepath.Clean(filepath.FromSlash(name))
		if filepath.IsAbs(clean) || strings.HasPrefix(clean, "..") {
			return nil, nil, fmt.Errorf("error looking up firmware %q: path leaves the firmware tree", name)
		}

		f, ok, err := firmwareFile(dir, clean)
		if err != nil {
			return nil, nil, err
		}

		if !ok {
			missing = append(missing, name)

			continue
		}

		f.Name = filepath.ToSlash(clean)
		found = append(found, f)
	}

	return found, missing, nil
}

func firmwareFile(dir, name string) (File, bool, error) {
	for _, ext := range []string{"", ".xz", ".zst"} {
		src := filepath.Join(dir, name+ext)

		st, err := os.Stat(src)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}

		if err != nil {
			return File{}, false, fmt.Errorf("error looking up firmware %s: %w", src, err)
		}

		if !st.Mode().IsRegular() {
			continue
		}

		if ext == "" {
			return File{Source: src}, true, nil
		}

		data, err := modules.ReadDecompressed(src)
		if err != nil {
			return File{}, false, err
		}

		return File{Data: data}, true, nil
	}

	return File{}, false, nil
}
