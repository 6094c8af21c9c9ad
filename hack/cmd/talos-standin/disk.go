package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The stand-in's installation is what real Talos keeps on its disk, in two places on the
// machine's first disk: the factory's disk image from the disk's start (boot loaders,
// kernel and this same initramfs, which then boots as "installed"), and a saved-state
// record in the disk's last MiB standing for Talos' STATE (the machine config) and META
// (the node unique token, which survives a reset, as META does).

// stateMagic starts the record; stateArea is the room it has at the disk's end.
const (
	stateMagic = "ANVIL-STANDIN-STATE v1\n"
	stateArea  = 1 << 20
)

// saved is the stand-in's state on disk.
type saved struct {
	// UniqueToken is the node unique token the machine joined Omni with.
	UniqueToken string `json:"uniqueToken"`
	// Config is the machine config Omni applied; empty once reset.
	Config []byte `json:"config,omitempty"`
	// Join holds Omni's join arguments from the kernel line Talos was installed from.
	Join joinArgs `json:"join"`
	// Schematic and Version are what was installed.
	Schematic         string `json:"schematic"`
	SchematicManifest string `json:"schematicManifest"`
	Version           string `json:"version"`
	// Factory is the image factory the install came from: the schematic extension's
	// author names it.
	Factory string `json:"factory,omitempty"`
}

// joinArgs are Omni's join kernel arguments, as given.
type joinArgs struct {
	API        string `json:"api"`
	EventsSink string `json:"eventsSink"`
	KernelLog  string `json:"kernelLog"`
}

// disk is the machine's first disk.
type disk struct {
	dev  string
	size int64
}

// firstDisk finds the machine's first disk under sysBlock (/sys/block): the first, by
// name, that is neither a loop, RAM, optical nor zram device.
func firstDisk(sysBlock string) (disk, error) {
	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return disk{}, fmt.Errorf("error listing the block devices: %w", err)
	}

	var names []string

	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "loop") || strings.HasPrefix(n, "ram") || strings.HasPrefix(n, "sr") || strings.HasPrefix(n, "zram") {
			continue
		}

		names = append(names, n)
	}

	sort.Strings(names)

	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(sysBlock, n, "size"))
		if err != nil {
			continue
		}

		sectors, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || sectors*512 < 2*stateArea {
			continue
		}

		return disk{dev: "/dev/" + n, size: sectors * 512}, nil
	}

	return disk{}, errors.New("no disk to install to")
}

// encodeSaved frames s: the magic, the JSON's length, the JSON and its SHA-256.
func encodeSaved(s *saved) ([]byte, error) {
	body, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("error encoding the saved state: %w", err)
	}

	var buf bytes.Buffer

	buf.WriteString(stateMagic)
	_ = binary.Write(&buf, binary.BigEndian, uint64(len(body))) // a bytes.Buffer does not fail
	buf.Write(body)

	sum := sha256.Sum256(body)
	buf.Write(sum[:])

	if buf.Len() > stateArea {
		return nil, fmt.Errorf("the saved state is %d bytes, more than the %d it has on disk", buf.Len(), stateArea)
	}

	return buf.Bytes(), nil
}

// decodeSaved reads a record framed by encodeSaved; nil, nil when there is none (the
// area does not start with the magic: a machine never installed, or wiped).
func decodeSaved(b []byte) (*saved, error) {
	rest, ok := bytes.CutPrefix(b, []byte(stateMagic))
	if !ok {
		return nil, nil //nolint:nilnil // no record is no state, not an error
	}

	if len(rest) < 8 {
		return nil, errors.New("the saved state is cut short")
	}

	n := binary.BigEndian.Uint64(rest)
	rest = rest[8:]

	if n > uint64(len(rest)) || uint64(len(rest))-n < sha256.Size {
		return nil, fmt.Errorf("the saved state claims %d bytes, more than its area holds", n)
	}

	body, sum := rest[:n], rest[n:n+sha256.Size]
	if want := sha256.Sum256(body); !bytes.Equal(sum, want[:]) {
		return nil, errors.New("the saved state's checksum does not match")
	}

	var s saved
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("error decoding the saved state: %w", err)
	}

	return &s, nil
}

// readSaved reads the record at the end of d.
func readSaved(d disk) (*saved, error) {
	f, err := os.Open(d.dev)
	if err != nil {
		return nil, fmt.Errorf("error opening %s: %w", d.dev, err)
	}

	defer f.Close()

	b := make([]byte, stateArea)
	if _, err := f.ReadAt(b, d.size-stateArea); err != nil {
		return nil, fmt.Errorf("error reading the saved state from %s: %w", d.dev, err)
	}

	return decodeSaved(b)
}

// writeSaved writes s at the end of d, the whole area (zeros after the record), and
// flushes it to the disk.
func writeSaved(d disk, s *saved) error {
	rec, err := encodeSaved(s)
	if err != nil {
		return err
	}

	area := make([]byte, stateArea)
	copy(area, rec)

	return writeAt(d, area, d.size-stateArea)
}

// installImage writes the disk image at url to the start of d, as Talos' installer
// writes its boot partitions.
func installImage(ctx context.Context, url string, d disk) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, fmt.Errorf("error making the image request: %w", err)
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("error fetching the disk image: %w", err)
	}

	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("error fetching the disk image: status %d", resp.StatusCode)
	}

	if resp.ContentLength > d.size-stateArea {
		return 0, fmt.Errorf("the disk image (%d bytes) does not fit %s (%d bytes)", resp.ContentLength, d.dev, d.size)
	}

	f, err := os.OpenFile(d.dev, os.O_WRONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("error opening %s: %w", d.dev, err)
	}

	defer f.Close()

	n, err := io.Copy(f, io.LimitReader(resp.Body, d.size-stateArea))
	if err != nil {
		return n, fmt.Errorf("error writing the disk image to %s: %w", d.dev, err)
	}

	if err := f.Sync(); err != nil {
		return n, fmt.Errorf("error flushing %s: %w", d.dev, err)
	}

	return n, nil
}

func writeAt(d disk, b []byte, off int64) error {
	f, err := os.OpenFile(d.dev, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("error opening %s: %w", d.dev, err)
	}

	defer f.Close()

	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("error writing %s: %w", d.dev, err)
	}

	if err := f.Sync(); err != nil {
		return fmt.Errorf("error flushing %s: %w", d.dev, err)
	}

	unix.Sync()

	return nil
}
