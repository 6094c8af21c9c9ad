// Package timeline puts the lab's logs on one clock, so that a machine's boot can be
// cut into stages: the machines' serial consoles (timestamped here, as their lines
// appear; QEMU writes them with no time of their own) and the provider's log (zap JSON,
// timestamped by the provider).
package timeline

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Line is one console line and when it was first seen.
type Line struct {
	At   time.Time
	Text string
}

// Consoles follows every serial log matching a glob (e.g. <lab>/machines/*/serial.log),
// including logs that appear later, and keeps their lines with the time they appeared.
type Consoles struct {
	glob  string
	every time.Duration

	mu    sync.Mutex
	lines map[string][]Line // by file
	pos   map[string]int64
	part  map[string][]byte // an unfinished last line
}

// Follow starts following glob until ctx is done; poll is how often the files are read
// (the precision of the timestamps).
func Follow(ctx context.Context, glob string, poll time.Duration) *Consoles {
	c := &Consoles{glob: glob, every: poll, lines: map[string][]Line{}, pos: map[string]int64{}, part: map[string][]byte{}}

	go c.run(ctx)

	return c
}

func (c *Consoles) run(ctx context.Context) {
	tick := time.NewTicker(c.every)
	defer tick.Stop()

	for {
		c.poll()

		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (c *Consoles) poll() {
	files, _ := filepath.Glob(c.glob) // only ErrBadPattern, a caller's constant

	for _, f := range files {
		c.read(f)
	}
}

func (c *Consoles) read(path string) {
	f, err := os.Open(path)
	if err != nil {
		return // not there yet
	}
	defer f.Close()

	c.mu.Lock()
	defer c.mu.Unlock()

	if _, err := f.Seek(c.pos[path], io.SeekStart); err != nil {
		return
	}

	b, err := io.ReadAll(f)
	if err != nil || len(b) == 0 {
		return
	}

	// Stamped once read, never before: a clock read ahead of the file would put a line
	// that was written in between before its time.
	now := time.Now()

	c.pos[path] += int64(len(b))
	b = append(c.part[path], b...)

	for {
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			break
		}

		if text := strings.TrimSpace(string(b[:i])); text != "" {
			c.lines[path] = append(c.lines[path], Line{At: now, Text: text})
		}

		b = b[i+1:]
	}

	c.part[path] = append([]byte(nil), b...)
}

// First is the first line of the console at path, seen at or after since, that match
// accepts.
func (c *Consoles) First(path string, since time.Time, match func(string) bool) (Line, bool) {
	c.poll()

	c.mu.Lock()
	defer c.mu.Unlock()

	for _, l := range c.lines[path] {
		if !l.At.Before(since) && match(l.Text) {
			return l, true
		}
	}

	return Line{}, false
}

// Any matches a line containing any of subs.
func Any(subs ...string) func(string) bool {
	return func(line string) bool {
		for _, s := range subs {
			if strings.Contains(line, s) {
				return true
			}
		}

		return false
	}
}

// All matches a line containing every one of subs.
func All(subs ...string) func(string) bool {
	return func(line string) bool {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				return false
			}
		}

		return true
	}
}
