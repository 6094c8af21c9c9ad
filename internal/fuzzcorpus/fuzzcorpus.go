// Package fuzzcorpus gives fuzz targets their seed corpora: each seed is added to the target
// and, when ANVIL_FUZZ_WRITE_CORPUS=1, written to the package's testdata/fuzz/<FuzzName>/
// in Go's corpus file format, so the committed corpus is built by the same real encoders
// the seeds come from:
//
//	ANVIL_FUZZ_WRITE_CORPUS=1 go test -run '^FuzzX$' ./pkg
package fuzzcorpus

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// WriteEnv names the environment variable that makes Seed write the corpus files.
const WriteEnv = "ANVIL_FUZZ_WRITE_CORPUS"

// Entry is one seed: a name for its corpus file and the fuzz arguments, in order.
type Entry struct {
	Name   string
	Values []any
}

// E builds an Entry.
func E(name string, values ...any) Entry { return Entry{Name: name, Values: values} }

// Seed adds every entry to f and, when WriteEnv is set, writes each as
// testdata/fuzz/<f.Name()>/seed-<name>.
func Seed(f *testing.F, entries ...Entry) {
	f.Helper()

	write := os.Getenv(WriteEnv) == "1"
	dir := filepath.Join("testdata", "fuzz", f.Name())

	if write {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.Fatalf("error creating %s: %v", dir, err)
		}
	}

	for _, e := range entries {
		f.Add(e.Values...)

		if !write {
			continue
		}

		data, err := Marshal(e.Values...)
		if err != nil {
			f.Fatalf("seed %s: %v", e.Name, err)
		}

		if err = os.WriteFile(filepath.Join(dir, "seed-"+e.Name), data, 0o644); err != nil {
			f.Fatalf("error writing seed %s: %v", e.Name, err)
		}
	}
}

// Marshal encodes fuzz arguments in the format go test reads from testdata/fuzz
// ("go test fuzz v1", then one typed Go literal per line).
func Marshal(values ...any) ([]byte, error) {
	var b strings.Builder

	b.WriteString("go test fuzz v1\n")

	for _, v := range values {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
		case string:
			fmt.Fprintf(&b, "string(%s)\n", strconv.Quote(v))
		case bool:
			fmt.Fprintf(&b, "bool(%t)\n", v)
		case int:
			fmt.Fprintf(&b, "int(%d)\n", v)
		case uint8:
			fmt.Fprintf(&b, "byte(%s)\n", strconv.QuoteRune(rune(v)))
		case uint16:
			fmt.Fprintf(&b, "uint16(%d)\n", v)
		case uint32:
			fmt.Fprintf(&b, "uint32(%d)\n", v)
		case int64:
			fmt.Fprintf(&b, "int64(%d)\n", v)
		default:
			return nil, fmt.Errorf("unsupported fuzz argument type %T", v)
		}
	}

	return []byte(b.String()), nil
}
