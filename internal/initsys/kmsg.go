package initsys

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
)

// kmsgNotice is the priority of the lines KernelLog writes: facility user, level notice,
// which the kernel prints on its consoles unless booted with "quiet".
const kmsgNotice = 1<<3 | 5

// KernelLog writes lines to the kernel's log (/dev/kmsg); the kernel prints each line
// whole on every console. A line written to a serial console directly can be cut in
// two by the kernel's own messages, which the console prints as they come — and a
// line a test looks for must not be. Talos logs to the console the same way.
type KernelLog struct {
	mu       sync.Mutex
	kmsg     io.WriteCloser
	fallback io.Writer
	pending  []byte
}

// OpenKernelLog opens /dev/kmsg; a line the kernel refuses (too long for one record)
// goes to fallback instead.
func OpenKernelLog(fallback io.Writer) (*KernelLog, error) {
	f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the kernel log: %w", err)
	}

	return NewKernelLog(f, fallback), nil
}

// NewKernelLog writes lines to kmsg, an open /dev/kmsg.
func NewKernelLog(kmsg io.WriteCloser, fallback io.Writer) *KernelLog {
	return &KernelLog{kmsg: kmsg, fallback: fallback}
}

// Write writes every complete line of p as one record; the rest waits for its newline.
func (k *KernelLog) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()

	k.pending = append(k.pending, p...)

	for {
		i := bytes.IndexByte(k.pending, '\n')
		if i < 0 {
			return len(p), nil
		}

		line := k.pending[:i+1]
		k.pending = k.pending[i+1:]

		// One write is one record; its "<priority>" prefix is not printed.
		if _, err := fmt.Fprintf(k.kmsg, "<%d>%s", kmsgNotice, line); err != nil {
			if _, ferr := k.fallback.Write(line); ferr != nil {
				return len(p), fmt.Errorf("writing a line to the kernel log (%w) and to the console: %w", err, ferr)
			}
		}
	}
}

// Close closes /dev/kmsg; a last line without its newline is written first.
func (k *KernelLog) Close() error {
	k.mu.Lock()
	rest := k.pending
	k.mu.Unlock()

	if len(rest) > 0 {
		if _, err := k.Write([]byte("\n")); err != nil {
			return err
		}
	}

	return k.kmsg.Close()
}
