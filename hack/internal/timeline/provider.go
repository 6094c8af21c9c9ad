package timeline

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Entry is one line of the provider's JSON log.
type Entry struct {
	At      time.Time
	Msg     string
	Machine string
	Fields  map[string]any
}

// ReadProviderLog reads the provider's zap JSON log; lines that are not JSON (a panic's
// trace, say) are skipped.
func ReadProviderLog(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("error opening the provider log: %w", err)
	}
	defer f.Close()

	var out []Entry

	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)

	for sc.Scan() {
		var fields map[string]any
		if json.Unmarshal(sc.Bytes(), &fields) != nil {
			continue
		}

		ts, _ := fields["ts"].(string)
		msg, _ := fields["msg"].(string)

		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}

		id, _ := fields["machine"].(string)
		out = append(out, Entry{At: at, Msg: msg, Machine: id, Fields: fields})
	}

	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("error reading the provider log: %w", err)
	}

	return out, nil
}

// FirstEntry is the first entry about machine with message msg at or after since whose
// fields include every key/value of match.
func FirstEntry(entries []Entry, since time.Time, machine, msg string, match map[string]string) (Entry, bool) {
next:
	for _, e := range entries {
		if e.At.Before(since) || e.Machine != machine || e.Msg != msg {
			continue
		}

		for k, v := range match {
			if s, _ := e.Fields[k].(string); s != v {
				continue next
			}
		}

		return e, true
	}

	return Entry{}, false
}
