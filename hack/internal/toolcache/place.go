package toolcache

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// place copies the cached binary to out, replacing what is there in one rename (a
// running binary at out keeps running). A copy, not a hard link: a link would let a
// write into out (cp over it) change the cached binary under its key.
func place(cached, out string) error {
	dir := filepath.Dir(out)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("error making %s: %w", dir, err)
	}

	tmp := filepath.Join(dir, "."+filepath.Base(out)+".toolcache-"+randomSuffix())

	if err := copyFile(cached, tmp); err != nil {
		_ = os.Remove(tmp)

		return err
	}

	if err := os.Rename(tmp, out); err != nil {
		_ = os.Remove(tmp)

		return fmt.Errorf("error installing %s: %w", out, err)
	}

	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("error opening %s: %w", src, err)
	}

	defer in.Close()

	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("error copying to %s: %w", dst, err)
	}

	if _, err = io.Copy(f, in); err != nil {
		f.Close()

		return fmt.Errorf("error copying %s to %s: %w", src, dst, err)
	}

	if err = f.Close(); err != nil {
		return fmt.Errorf("error copying %s to %s: %w", src, dst, err)
	}

	return nil
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)

	return hex.EncodeToString(b)
}
