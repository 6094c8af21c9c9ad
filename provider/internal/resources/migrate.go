package resources

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ReadState reads every resource of the persistent namespace from the embedded state in
// dir, changing nothing there: state.db is opened read-only and decrypted with dir's
// provider.key, which must exist (none is made: a new key would read nothing). A state
// a process holds (a running provider) is refused at once, and so is a damaged one
// (ErrCorrupt), as Open refuses it.
func ReadState(dir string) (*Keys, []resource.Resource, error) {
	if fi, err := os.Stat(dir); err != nil {
		return nil, nil, fmt.Errorf("error reading the state directory: %w", err)
	} else if !fi.IsDir() {
		return nil, nil, fmt.Errorf("%s is not a state directory", dir)
	}

	if _, err := os.Stat(filepath.Join(dir, keyFile)); err != nil {
		return nil, nil, fmt.Errorf("error reading the provider key in %s (the state is encrypted with it): %w", dir, err)
	}

	keys, err := LoadKeys(dir)
	if err != nil {
		return nil, nil, err
	}

	path := DBFile(dir)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("no embedded state in %s: %s is missing", dir, path)
	}

	if err := checkLength(path); err != nil {
		return nil, nil, err
	}

	// A running provider holds the file's lock for writing: a reader waits for it, so a
	// short timeout says the provider runs.
	db, err := openGuarded(path, &bbolt.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, nil, fmt.Errorf("a provider is running on %s: stop it first (%w)", dir, err)
		}

		return nil, nil, err
	}

	defer db.Close()

	marshaler := newMarshaler(keys)

	if _, err := verifyDB(db, marshaler); err != nil {
		return nil, nil, err
	}

	var out []resource.Resource

	err = db.View(func(tx *bbolt.Tx) error {
		return readNamespace(tx, func(val []byte) error {
			r, err := marshaler.UnmarshalResource(val)
			if err != nil {
				return fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
			}

			out = append(out, r)

			return nil
		})
	})
	if err != nil {
		return nil, nil, err
	}

	return keys, out, nil
}

// readNamespace calls f with each stored resource of the persistent namespace (the cosi
// bolt store's layout: namespace bucket → type bucket → id → resource), turning a fault
// on a damaged file into ErrCorrupt.
func readNamespace(tx *bbolt.Tx, f func(val []byte) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))

	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, tx.DB().Path(), r)
		}
	}()

	ns := tx.Bucket([]byte(NamespaceName))
	if ns == nil {
		return nil // a state that never held a resource
	}

	return ns.ForEach(func(typ, _ []byte) error {
		return ns.Bucket(typ).ForEach(func(_, val []byte) error { return f(val) })
	})
}
