package transitions

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Limits on what an allocation may carry. They keep one request from bloating the
// state, the iPXE script (kernel args) or the metadata server (config).
const (
	MaxConfigSize     = 1 << 20
	maxExtensions     = 64
	maxKernelArgs     = 64
	maxKernelArgLen   = 256
	maxKernelArgsSize = 2048 // all args together, a fraction of a kernel cmdline
	maxMachineIDLen   = 128
)

// Talos before 1.8 cannot boot with what the provider serves (agent mode, the metadata
// kernel args), so older versions are refused.
const minTalosMinor = 8

var (
	talosVersionRe = regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$`)
	extensionRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*/[a-z0-9][a-z0-9._-]*$`)
)

// validateTalosVersion checks a Talos version and returns it with the leading "v".
func validateTalosVersion(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", errors.New("talos version is required")
	}

	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}

	m := talosVersionRe.FindStringSubmatch(v)
	if m == nil {
		return "", fmt.Errorf("talos version %q is not a version like v1.9.0", v)
	}

	major, errMajor := strconv.Atoi(m[1])
	minor, errMinor := strconv.Atoi(m[2])

	if errMajor != nil || errMinor != nil || major < 1 || (major == 1 && minor < minTalosMinor) {
		return "", fmt.Errorf("talos version %s is not supported: v1.%d.0 or later is required", v, minTalosMinor)
	}

	return v, nil
}

// validateExtensions checks extension names and returns them sorted without duplicates,
// so that the same set always yields the same schematic ID.
func validateExtensions(exts []string) ([]string, error) {
	if len(exts) > maxExtensions {
		return nil, fmt.Errorf("too many extensions: %d, at most %d", len(exts), maxExtensions)
	}

	out := make([]string, 0, len(exts))

	for _, ext := range exts {
		ext = strings.TrimSpace(ext)
		if !extensionRe.MatchString(ext) {
			return nil, fmt.Errorf("extension %q is not an official extension name like siderolabs/intel-ucode", ext)
		}

		out = append(out, ext)
	}

	slices.Sort(out)

	return slices.Compact(out), nil
}

// validateKernelArgs checks that each entry is one argument: the args end up on a kernel
// command line inside an iPXE script, where a space or newline would smuggle in more.
func validateKernelArgs(args []string) ([]string, error) {
	if len(args) > maxKernelArgs {
		return nil, fmt.Errorf("too many kernel args: %d, at most %d", len(args), maxKernelArgs)
	}

	total := 0

	for _, arg := range args {
		switch {
		case arg == "":
			return nil, errors.New("empty kernel arg")
		case len(arg) > maxKernelArgLen:
			return nil, fmt.Errorf("kernel arg %.32q... is longer than %d bytes", arg, maxKernelArgLen)
		case !utf8.ValidString(arg):
			return nil, fmt.Errorf("kernel arg %q is not valid UTF-8", arg)
		case strings.ContainsFunc(arg, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
			return nil, fmt.Errorf("kernel arg %q contains a space or control character: give one argument per entry", arg)
		}

		total += len(arg) + 1
	}

	if total > maxKernelArgsSize {
		return nil, fmt.Errorf("kernel args total %d bytes, at most %d", total, maxKernelArgsSize)
	}

	return slices.Clone(args), nil
}

// validateConfig checks that config is a Talos machine configuration: YAML documents,
// each a mapping with "version" (v1alpha1) or "apiVersion" and "kind" (the other
// documents). Error messages never quote the config: it carries secrets.
func validateConfig(config []byte) error {
	if len(config) > MaxConfigSize {
		return fmt.Errorf("config is %d bytes, at most %d", len(config), MaxConfigSize)
	}

	if !utf8.Valid(config) {
		return errors.New("config is not valid UTF-8")
	}

	dec := yaml.NewDecoder(bytes.NewReader(config))

	for n := 1; ; n++ {
		var doc map[string]any

		err := dec.Decode(&doc)

		switch {
		case errors.Is(err, io.EOF):
			if n == 1 {
				return errors.New("config has no YAML document")
			}

			return nil
		case err != nil:
			return fmt.Errorf("config document %d is not a YAML mapping: %w", n, redactYAMLError(err))
		case doc == nil:
			continue // an empty document between separators
		}

		_, hasVersion := doc["version"]
		_, hasAPIVersion := doc["apiVersion"]
		_, hasKind := doc["kind"]

		if !hasVersion && (!hasAPIVersion || !hasKind) {
			return fmt.Errorf("config document %d is not a Talos config document: it has neither version nor apiVersion and kind", n)
		}
	}
}

// redactYAMLError keeps the line number of a YAML error but drops any quoted value.
func redactYAMLError(err error) error {
	msg := err.Error()
	if i := strings.IndexAny(msg, "`'\""); i >= 0 {
		msg = strings.TrimSpace(msg[:i]) + " ..."
	}

	return errors.New(msg)
}

// validateMachineID bounds the ID before it is used as a resource ID or logged.
func validateMachineID(id string) error {
	switch {
	case id == "":
		return errors.New("machine id is required")
	case len(id) > maxMachineIDLen:
		return fmt.Errorf("machine id is longer than %d bytes", maxMachineIDLen)
	case strings.ContainsFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return errors.New("machine id contains a space or control character")
	}

	return nil
}

// maxOwnerLen bounds an allocation's owner: a prefix, a Kubernetes namespace (63) and
// name (253) fit.
const maxOwnerLen = 512

// validateOwner checks an allocation's owner: printable, no spaces, bounded ("" is none).
func validateOwner(owner string) error {
	switch {
	case len(owner) > maxOwnerLen:
		return fmt.Errorf("owner %.32q... is longer than %d bytes", owner, maxOwnerLen)
	case strings.ContainsFunc(owner, func(r rune) bool { return r > unicode.MaxASCII || !unicode.IsGraphic(r) || unicode.IsSpace(r) }):
		return fmt.Errorf("owner %q may hold only printable ASCII without spaces", owner)
	}

	return nil
}
