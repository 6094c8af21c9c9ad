package fleetsim

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Event is one line of the simulator's output (see the package doc).
type Event struct {
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Machine string    `json:"machine,omitempty"`
	Index   *int      `json:"index,omitempty"`

	Address  string `json:"address,omitempty"`
	MAC      string `json:"mac,omitempty"`
	Serial   string `json:"serial,omitempty"`
	NICs     int    `json:"nics,omitempty"`
	Boot     int    `json:"boot,omitempty"`
	Session  int    `json:"session,omitempty"`
	Decision string `json:"decision,omitempty"`
	Status   string `json:"status,omitempty"`
	Order    string `json:"order,omitempty"`
	Kind     string `json:"kind,omitempty"`
	Wipe     string `json:"wipe,omitempty"`
	Mode     string `json:"mode,omitempty"`
	Message  string `json:"message,omitempty"`
	Disks    int    `json:"disks,omitempty"`
	By       string `json:"by,omitempty"`
	Via      string `json:"via,omitempty"`
	State    string `json:"state,omitempty"`
	Cmd      string `json:"cmd,omitempty"`
	Error    string `json:"error,omitempty"`

	Counts map[string]int `json:"counts,omitempty"`
}

// flushEvery bounds how long an event waits in the buffer: readers see events promptly,
// agents never wait on a slow reader's pipe for each line.
const flushEvery = 20 * time.Millisecond

// events writes events as JSON lines, buffered, flushed at least every flushEvery.
type events struct {
	mu     sync.Mutex
	w      *bufio.Writer
	dirty  bool
	counts map[string]int
	err    error
}

func newEvents(w io.Writer) *events {
	return &events{w: bufio.NewWriterSize(w, 64<<10), counts: map[string]int{}}
}

// emit writes e, stamped now.
func (ev *events) emit(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}

	b, err := json.Marshal(e)
	if err != nil {
		return // every field marshals: cannot happen
	}

	ev.mu.Lock()
	defer ev.mu.Unlock()

	ev.counts[e.Event]++

	if ev.err != nil {
		return
	}

	if _, err = ev.w.Write(append(b, '\n')); err != nil {
		ev.err = err
	}

	ev.dirty = true
}

// run flushes until ctx is done, then writes the summary and flushes a last time.
func (ev *events) run(ctx context.Context) {
	ticker := time.NewTicker(flushEvery)
	defer ticker.Stop()

	for {
		select {
		case <-ctx.Done():
			ev.mu.Lock()
			counts := make(map[string]int, len(ev.counts))
			for k, v := range ev.counts {
				counts[k] = v
			}
			ev.mu.Unlock()

			ev.emit(Event{Event: "summary", Counts: counts})
			ev.flush()

			return
		case <-ticker.C:
			ev.flush()
		}
	}
}

func (ev *events) flush() {
	ev.mu.Lock()
	defer ev.mu.Unlock()

	if ev.dirty && ev.err == nil {
		ev.err = ev.w.Flush()
		ev.dirty = false
	}
}
