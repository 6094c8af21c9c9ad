package console

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// watchedTypes are what the pages show: a change to any is news to them.
var watchedTypes = []resource.Type{
	resources.MachineType, resources.MachineIntentType, resources.MachineStatusType, resources.MachineLabelsType,
	resources.MachineInventoryType, resources.BMCConfigType, resources.PowerStatusType, resources.OmniMachineType,
}

const (
	// liveThrottle is the least time between two updates of one page: a rack booting
	// at once is one redraw, not hundreds.
	liveThrottle = 500 * time.Millisecond
	// liveKeepAlive keeps proxies from closing a quiet stream.
	liveKeepAlive = 30 * time.Second
	// rewatchDelay is the wait before following the state again after its watch failed.
	rewatchDelay = time.Second
)

// broadcast wakes every live page at once: a channel closed and replaced on each change.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()

	close(b.ch)
	b.ch = make(chan struct{})
}

// follow watches the state (and the boot timelines) until ctx is done, notifying on
// each change and noting what an operator would want in a machine's recent events.
func (b *broadcast) follow(ctx context.Context, st state.State, trace *boottrace.Recorder, logger *zap.Logger) error {
	notes := newNoter(trace)

	for {
		err := b.watch(ctx, st, trace, notes)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // stopping
		}

		logger.Warn("console lost the state's watch; following it again", zap.Error(err))

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(rewatchDelay):
		}
	}
}

func (b *broadcast) watch(ctx context.Context, st state.State, trace *boottrace.Recorder, notes *noter) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	events := make(chan state.Event, 256)

	for _, t := range watchedTypes {
		if err := st.WatchKind(ctx, resource.NewMetadata(resources.NamespaceName, t, "", resource.VersionUndefined), events,
			state.WithBootstrapContents(true)); err != nil {
			return fmt.Errorf("error watching %s: %w", t, err)
		}
	}

	traced := trace.Changed()

	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-traced:
			traced = trace.Changed()

			b.notify()
		case ev := <-events:
			switch ev.Type {
			case state.Errored:
				return ev.Error
			case state.Bootstrapped, state.Noop:
				continue
			case state.Created, state.Updated:
				notes.observe(ev.Resource)
			case state.Destroyed:
			}

			b.notify()
		}
	}
}

// liveUpdates streams a page's live fragment (server-sent events), re-rendered on each
// change: view=machines (with the page's selector and text filter) or view=machine&id=.
func (s *Server) liveUpdates(w http.ResponseWriter, r *http.Request, sess *session) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported on this connection", http.StatusInternalServerError)

		return
	}

	q := r.URL.Query()

	var render func(context.Context, *bytes.Buffer) error

	switch q.Get("view") {
	case "machines":
		filter, err := parseFilter(q.Get("selector"), q.Get("q"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)

			return
		}

		render = func(ctx context.Context, buf *bytes.Buffer) error {
			data, err := s.machinesData(ctx, filter)
			if err != nil {
				return err
			}

			return s.pages.ExecuteTemplate(buf, "machine-rows", data)
		}
	case "machine":
		id := q.Get("id")
		render = func(ctx context.Context, buf *bytes.Buffer) error {
			data, err := s.machineData(ctx, id, nil)
			if err != nil {
				return err
			}

			// The fragment's forms carry the session's CSRF token, as the page's do.
			data.pageData = s.page(sess, id)

			return s.pages.ExecuteTemplate(buf, "machine-live", data)
		}
	default:
		http.Error(w, "view must be machines or machine", http.StatusBadRequest)

		return
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()

	ctx := r.Context()
	keepAlive := time.NewTicker(liveKeepAlive)

	defer keepAlive.Stop()

	var last []byte

	for {
		changed := s.live.wait()

		var buf bytes.Buffer
		if err := render(ctx, &buf); err != nil {
			if ctx.Err() != nil {
				return
			}

			s.logger.Warn("error rendering a live update", zap.Error(err))
			buf.Reset()
			fmt.Fprintf(&buf, `<p class="error">%s</p>`, template.HTMLEscapeString(err.Error()))
		}

		if !bytes.Equal(buf.Bytes(), last) {
			last = bytes.Clone(buf.Bytes())

			if err := writeEvent(w, "update", buf.String()); err != nil {
				return
			}

			flusher.Flush()
		}

		select {
		case <-ctx.Done():
			return
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}

			flusher.Flush()

			continue
		case <-changed:
		}

		// Let a burst of changes settle into one redraw.
		select {
		case <-ctx.Done():
			return
		case <-time.After(liveThrottle):
		}
	}
}

// writeEvent writes one server-sent event, each line of data as its own data field.
func writeEvent(w http.ResponseWriter, name, data string) error {
	var b strings.Builder

	b.WriteString("event: " + name + "\n")

	for line := range strings.SplitSeq(data, "\n") {
		b.WriteString("data: " + strings.TrimSuffix(line, "\r") + "\n")
	}

	b.WriteString("\n")

	_, err := fmt.Fprint(w, b.String())

	return err
}
