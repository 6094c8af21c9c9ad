package resources

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/state/impl/store"
	"github.com/cosi-project/runtime/pkg/state/impl/store/encryption"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.uber.org/zap"
)

// The state's backups: consistent copies of state.db, each verified before it is kept,
// in <state-dir>/backups, the newest BackupKeep of them.
const (
	// BackupDirName is the backups' directory inside the state directory.
	BackupDirName = "backups"
	// DefaultBackupKeep is how many backups are kept.
	DefaultBackupKeep = 5
	// DefaultBackupInterval is how often a running provider takes one.
	DefaultBackupInterval = time.Hour

	backupPrefix = "state-"
	backupSuffix = ".db"
	// The name sorts by time: pruning keeps the last names.
	backupTimeFormat = "20060102T150405.000000000Z"
)

// ErrCorrupt marks a state file that is not a whole, consistent state: truncated,
// damaged, or written with another provider.key.
var ErrCorrupt = errors.New("state file is damaged")

// DBFile returns the path of the state database in dir.
func DBFile(dir string) string { return filepath.Join(dir, dbFile) }

// newMarshaler returns the marshaler the state is stored with: protobuf, encrypted with
// the storage key.
func newMarshaler(keys *Keys) store.Marshaler {
	return encryption.NewMarshaler(
		store.ProtobufMarshaler{},
		encryption.NewCipher(encryption.KeyProviderFunc(func() ([]byte, error) { return keys.storage, nil })),
	)
}

// Summary is what a verification found.
type Summary struct {
	// Resources is how many resources the file holds, every one decrypted.
	Resources int
	// Size is the file's size in bytes.
	Size int64
}

// VerifyFile checks that path is a whole, consistent state database whose every resource
// decrypts with keys. It opens the file read-only and fails at once if another process
// holds it for writing.
func VerifyFile(path string, keys *Keys) (Summary, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Summary{}, fmt.Errorf("error reading state file: %w", err)
	}

	if err := checkLength(path); err != nil {
		return Summary{}, err
	}

	db, err := openGuarded(path, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return Summary{}, err
	}

	defer db.Close()

	n, err := verifyDB(db, newMarshaler(keys))
	if err != nil {
		return Summary{}, err
	}

	return Summary{Resources: n, Size: fi.Size()}, nil
}

// openGuarded opens a bbolt file, turning a fault on a damaged file (bbolt maps it and
// reads pages a truncation removed, which is SIGBUS) into ErrCorrupt instead of a crash.
func openGuarded(path string, opts *bbolt.Options) (db *bbolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))

	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, r)
		}
	}()

	db, err = bbolt.Open(path, 0o600, opts)
	if err != nil {
		if isBoltFormatError(err) {
			return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
		}

		return nil, fmt.Errorf("error opening %s: %w", path, err)
	}

	return db, nil
}

// isBoltFormatError tells whether err from bbolt.Open says the file is not a valid
// database (rather than, say, locked or unreadable).
func isBoltFormatError(err error) bool {
	msg := err.Error()

	for _, s := range []string{"invalid database", "checksum error", "version mismatch", "file size too small", "invalid mapping"} {
		if strings.Contains(msg, s) {
			return true
		}
	}

	return false
}

// verifyDB checks db's size against its own high-water mark (a truncation), its page
// structure (bbolt's consistency check), and that every resource decrypts and decodes.
// It returns the number of resources.
func verifyDB(db *bbolt.DB, marshaler store.Marshaler) (n int, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))

	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, db.Path(), r)
		}
	}()

	fi, err := os.Stat(db.Path())
	if err != nil {
		return 0, fmt.Errorf("error reading state file: %w", err)
	}

	err = db.View(func(tx *bbolt.Tx) error {
		if tx.Size() > fi.Size() {
			return fmt.Errorf("%w: %s is truncated: %d bytes of %d", ErrCorrupt, db.Path(), fi.Size(), tx.Size())
		}

		var problems []string

		for err := range tx.Check() {
			// The check goes on after the first; a few say enough.
			if len(problems) < 3 {
				problems = append(problems, err.Error())
			}
		}

		if len(problems) > 0 {
			return fmt.Errorf("%w: %s: %s", ErrCorrupt, db.Path(), strings.Join(problems, "; "))
		}

		// Layout (cosi bolt store): namespace bucket → type bucket → id → resource.
		return tx.ForEach(func(ns []byte, nsBucket *bbolt.Bucket) error {
			return nsBucket.ForEach(func(typ, v []byte) error {
				typeBucket := nsBucket.Bucket(typ)
				if v != nil || typeBucket == nil {
					return fmt.Errorf("%w: %s: unexpected key %q in namespace %q", ErrCorrupt, db.Path(), typ, ns)
				}

				return typeBucket.ForEach(func(id, val []byte) error {
					if _, err := marshaler.UnmarshalResource(val); err != nil {
						return fmt.Errorf("%w: %s: resource %s/%s/%s does not decrypt or decode with this provider.key: %w",
							ErrCorrupt, db.Path(), ns, typ, id, err)
					}

					n++

					return nil
				})
			})
		})
	})

	return n, err
}

// Backups lists the backups in dir's backups directory, newest first.
func Backups(dir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, BackupDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}

	if err != nil {
		return nil, fmt.Errorf("error listing backups: %w", err)
	}

	var names []string

	for _, e := range entries {
		if name := e.Name(); e.Type().IsRegular() && strings.HasPrefix(name, backupPrefix) && strings.HasSuffix(name, backupSuffix) {
			names = append(names, filepath.Join(dir, BackupDirName, name))
		}
	}

	slices.Sort(names)
	slices.Reverse(names)

	return names, nil
}

// newestGoodBackup returns the newest backup in dir that verifies with keys, or "".
func newestGoodBackup(dir string, keys *Keys) string {
	names, err := Backups(dir)
	if err != nil {
		return ""
	}

	for _, name := range names {
		if _, err := VerifyFile(name, keys); err == nil {
			return name
		}
	}

	return ""
}

// refusal explains why the provider will not start on dir's state, and what to do.
func refusal(dir string, keys *Keys, cause error) error {
	if backup := newestGoodBackup(dir, keys); backup != "" {
		return fmt.Errorf("refusing to start: %w; restore the newest good backup with `anvilctl state restore --state-dir %s %s` (it keeps the damaged file beside it), then start the provider again",
			cause, dir, backup)
	}

	return fmt.Errorf("refusing to start: %w; no good backup in %s: restore one from elsewhere with `anvilctl state restore --state-dir %s FILE`, or move %s away to start with an empty state (every machine is then unknown)",
		cause, filepath.Join(dir, BackupDirName), dir, DBFile(dir))
}

// Backup writes a consistent, verified copy of the state into the backups directory and
// removes the oldest beyond the kept number. It returns the backup's path. The copy is
// taken in one read transaction while the provider goes on writing.
func (s *Store) Backup(ctx context.Context) (string, error) {
	if s.OnEtcd() {
		return "", ErrBackupsOnEtcd
	}

	s.backupMu.Lock()
	defer s.backupMu.Unlock()

	if err := ctx.Err(); err != nil {
		return "", err
	}

	backups := filepath.Join(s.dir, BackupDirName)
	if err := os.MkdirAll(backups, 0o700); err != nil {
		return "", fmt.Errorf("error creating the backup directory: %w", err)
	}

	name := filepath.Join(backups, backupPrefix+s.now().UTC().Format(backupTimeFormat)+backupSuffix)
	tmp := name + ".tmp"

	if err := s.writeCopy(tmp); err != nil {
		os.Remove(tmp)

		return "", fmt.Errorf("error writing the state backup %s: %w", name, err)
	}

	if _, err := VerifyFile(tmp, s.keys); err != nil {
		os.Remove(tmp)

		return "", fmt.Errorf("error verifying the state backup %s: %w", name, err)
	}

	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)

		return "", fmt.Errorf("error keeping the state backup %s: %w", name, err)
	}

	syncDir(backups)

	if err := s.pruneBackups(); err != nil {
		return name, err
	}

	return name, nil
}

// writeCopy writes the database to path (mode 0600) and syncs it.
func (s *Store) writeCopy(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}

	err = s.db.View(func(tx *bbolt.Tx) error {
		_, err := tx.WriteTo(f)

		return err
	})
	if err == nil {
		err = f.Sync()
	}

	if cerr := f.Close(); err == nil {
		err = cerr
	}

	return err
}

// pruneBackups removes the oldest backups beyond the kept number, and temporary files a
// crash left.
func (s *Store) pruneBackups() error {
	names, err := Backups(s.dir)
	if err != nil {
		return err
	}

	var errs []error

	if len(names) > s.backupKeep {
		for _, name := range names[s.backupKeep:] {
			if err := os.Remove(name); err != nil {
				errs = append(errs, fmt.Errorf("error removing old backup: %w", err))
			}
		}
	}

	tmps, _ := filepath.Glob(filepath.Join(s.dir, BackupDirName, "*.tmp"))
	for _, tmp := range tmps {
		os.Remove(tmp)
	}

	return errors.Join(errs...)
}

// RunBackups takes a backup now and then every interval until ctx is done. A failed
// backup (a full disk) is logged and tried again at the next tick; it never stops the
// provider.
func (s *Store) RunBackups(ctx context.Context, interval time.Duration, logger *zap.Logger) error {
	if logger == nil {
		logger = zap.NewNop()
	}

	if s.OnEtcd() {
		return nil // etcd's snapshots are the backups
	}

	ticker := time.NewTicker(interval)
	defer ticker.Stop()

	for {
		if name, err := s.Backup(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}

			logger.Warn("state backup failed; the previous backups are kept", zap.Error(err))
		} else {
			logger.Info("state backed up", zap.String("file", name))
		}

		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// syncDir makes a rename in dir durable; a failure only weakens that, so it is ignored.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync() //nolint:errcheck // best effort
		d.Close()
	}
}

// Restored says what a Restore did.
type Restored struct {
	// Replaced is where the replaced state.db was kept ("" when there was none).
	Replaced string
	// Resources is how many resources the restored state holds.
	Resources int
}

// Restore replaces dir's state.db with src after checking that src is a whole state that
// decrypts with dir's provider.key. The provider must be stopped: a held lock on state.db
// refuses. The replaced file is kept beside it as state.db.replaced-<time>.
func Restore(dir, src string, now time.Time) (Restored, error) {
	keys, err := readKeys(dir)
	if err != nil {
		return Restored{}, err
	}

	sum, err := VerifyFile(src, keys)
	if err != nil {
		return Restored{}, fmt.Errorf("refusing to restore %s: %w", src, err)
	}

	live := DBFile(dir)

	if err := checkUnlocked(live); err != nil {
		return Restored{}, err
	}

	tmp := live + ".restore.tmp"
	if err := copyFile(src, tmp); err != nil {
		os.Remove(tmp)

		return Restored{}, fmt.Errorf("error copying %s into %s: %w", src, dir, err)
	}

	out := Restored{Resources: sum.Resources}

	if _, err := os.Stat(live); err == nil {
		out.Replaced = live + ".replaced-" + now.UTC().Format(backupTimeFormat)
		if err := os.Rename(live, out.Replaced); err != nil {
			os.Remove(tmp)

			return Restored{}, fmt.Errorf("error keeping the replaced state: %w", err)
		}
	}

	if err := os.Rename(tmp, live); err != nil {
		return out, fmt.Errorf("error putting the restored state in place (the replaced one is %s): %w", out.Replaced, err)
	}

	syncDir(dir)

	return out, nil
}

// readKeys reads dir's provider.key without creating one: a restore without the key the
// state was written with could only fail.
func readKeys(dir string) (*Keys, error) {
	if _, err := os.Stat(filepath.Join(dir, keyFile)); err != nil {
		return nil, fmt.Errorf("error reading the provider key in %s (a state restores only with the provider.key it was written with): %w", dir, err)
	}

	return LoadKeys(dir)
}

// checkUnlocked fails if a process (the provider) holds path's lock.
func checkUnlocked(path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}

	db, err := openGuarded(path, &bbolt.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return fmt.Errorf("%s is locked: the provider is running; stop it before restoring", path)
		}

		// A damaged live file is what a restore is for.
		return nil
	}

	return db.Close()
}

// copyFile copies src to dst (mode 0600) and syncs it.
func copyFile(src, dst string) error {
	data, err := os.Open(src)
	if err != nil {
		return err
	}
	defer data.Close()

	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}

	_, err = f.ReadFrom(data)
	if err == nil {
		err = f.Sync()
	}

	if cerr := f.Close(); err == nil {
		err = cerr
	}

	return err
}

// bbolt's meta page (page 0 and 1): a 16-byte page header, then magic, version, page
// size, flags, root bucket, freelist, high-water page id, txid and an FNV-64a checksum of
// the fields before it.
const (
	boltMagic        = 0xED0CDAED
	metaOffset       = 16
	metaChecksumFrom = metaOffset
	metaChecksumTo   = metaOffset + 56
)

type boltMeta struct {
	pageSize uint32
	pgid     uint64
	txid     uint64
}

// parseMeta reads one meta page; ok is false when it is not a valid one.
func parseMeta(page []byte) (boltMeta, bool) {
	if len(page) < metaChecksumTo+8 {
		return boltMeta{}, false
	}

	le := binary.LittleEndian
	if le.Uint32(page[metaOffset:]) != boltMagic {
		return boltMeta{}, false
	}

	h := fnv.New64a()
	h.Write(page[metaChecksumFrom:metaChecksumTo])

	if h.Sum64() != le.Uint64(page[metaChecksumTo:]) {
		return boltMeta{}, false
	}

	return boltMeta{pageSize: le.Uint32(page[metaOffset+8:]), pgid: le.Uint64(page[metaOffset+40:]), txid: le.Uint64(page[metaOffset+48:])}, true
}

// checkLength reads path's meta pages before bbolt maps the file: a file shorter than
// its own newest meta says (a truncation) or without a valid meta is ErrCorrupt. bbolt
// itself would fault reading the missing pages, or start an empty database on an empty
// file.
func checkLength(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("error reading state file: %w", err)
	}
	defer f.Close()

	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("error reading state file: %w", err)
	}

	if fi.Size() == 0 {
		return fmt.Errorf("%w: %s is empty", ErrCorrupt, path)
	}

	first := make([]byte, 4096)
	n, _ := f.ReadAt(first, 0)

	m0, ok0 := parseMeta(first[:n])

	// Page 1 is one page size on: take it from page 0, else try the usual sizes.
	var (
		m1  boltMeta
		ok1 bool
	)

	sizes := []int64{4096, 8192, 16384, 65536}
	if ok0 {
		sizes = []int64{int64(m0.pageSize)}
	}

	for _, size := range sizes {
		page := make([]byte, metaChecksumTo+8)
		if n, _ := f.ReadAt(page, size); n == len(page) {
			if m1, ok1 = parseMeta(page); ok1 {
				break
			}
		}
	}

	var m boltMeta

	switch {
	case ok0 && ok1:
		m = m0
		if m1.txid > m0.txid {
			m = m1
		}
	case ok0:
		m = m0
	case ok1:
		m = m1
	default:
		return fmt.Errorf("%w: %s has no valid bbolt meta page", ErrCorrupt, path)
	}

	// Compared unsigned: a damaged high-water mark must not wrap around.
	if size, want := uint64(max(fi.Size(), 0)), m.pgid*uint64(m.pageSize); m.pgid > math.MaxUint64/max(uint64(m.pageSize), 1) || size < want {
		return fmt.Errorf("%w: %s is truncated: %d bytes of %d", ErrCorrupt, path, size, want)
	}

	return nil
}

// checkPresent checks, before bbolt would create a fresh database, that dir's state file
// is there and not empty whenever backups say a state existed; and that an existing file
// is whole (checkLength).
func checkPresent(dir string) error {
	fi, err := os.Stat(DBFile(dir))

	switch {
	case errors.Is(err, fs.ErrNotExist):
		names, lerr := Backups(dir)
		if lerr != nil {
			return lerr
		}

		if len(names) > 0 {
			return fmt.Errorf("%w: %s is missing, yet %d backups of it exist", ErrCorrupt, DBFile(dir), len(names))
		}

		return nil // a first start
	case err != nil:
		return fmt.Errorf("error reading state file: %w", err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", DBFile(dir))
	}

	return checkLength(DBFile(dir))
}

// checkState verifies dir's state before the store opens it for writing: read-only, so
// that a damaged file cannot be changed further, and whole: every resource is read and
// decrypted once (the in-memory state loads lazily, and a resource that does not decrypt
// would otherwise surface as a failing controller much later).
func checkState(dir string, keys *Keys) error {
	if err := checkPresent(dir); err != nil {
		return refusal(dir, keys, err)
	}

	if _, err := os.Stat(DBFile(dir)); errors.Is(err, fs.ErrNotExist) {
		return nil // a first start
	}

	_, err := VerifyFile(DBFile(dir), keys)

	switch {
	case err == nil:
		return nil
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("error opening state %s: it is locked by another process", dir)
	case errors.Is(err, ErrCorrupt):
		return refusal(dir, keys, err)
	default:
		return fmt.Errorf("error checking state %s: %w", dir, err)
	}
}
