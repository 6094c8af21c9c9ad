package labtest

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strings"
	"time"
)

// LogLine is one line of a provider's log (zap's JSON, ISO 8601 times).
type LogLine struct {
	At    time.Time
	Level string
	Msg   string
	// Error is the line's "error" field, if any.
	Error string
	// Raw is the line as written.
	Raw string
}

// zapTime is the layout of zapcore.ISO8601TimeEncoder, which the provider logs with.
const zapTime = "2006-01-02T15:04:05.000Z0700"

// LogMark is a place in a log: what is written after it is what a test looks at.
type LogMark struct {
	Path   string
	Offset int64
}

// MarkLog marks the end of the log at path as it is now (0 when it does not exist yet).
func MarkLog(path string) LogMark {
	var off int64
	if st, err := os.Stat(path); err == nil {
		off = st.Size()
	}

	return LogMark{Path: path, Offset: off}
}

// Text is what was written to the log after the mark ("" when it cannot be read).
func (m LogMark) Text() string {
	b, err := os.ReadFile(m.Path)
	if err != nil || int64(len(b)) < m.Offset {
		return ""
	}

	return string(b[m.Offset:])
}

// Lines are the JSON lines written after the mark; a line that is not zap's JSON (a
// panic, a partial last line) is left out.
func (m LogMark) Lines() []LogLine {
	f, err := os.Open(m.Path)
	if err != nil {
		return nil
	}
	defer f.Close()

	if _, err := f.Seek(m.Offset, io.SeekStart); err != nil {
		return nil
	}

	var lines []LogLine

	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)

	for sc.Scan() {
		raw := sc.Text()
		if !strings.HasPrefix(raw, "{") {
			continue
		}

		var l struct {
			Level string `json:"level"`
			TS    string `json:"ts"`
			Msg   string `json:"msg"`
			Error string `json:"error"`
		}

		if json.Unmarshal([]byte(raw), &l) != nil {
			continue
		}

		at, err := time.Parse(zapTime, l.TS)
		if err != nil {
			continue
		}

		lines = append(lines, LogLine{At: at, Level: l.Level, Msg: l.Msg, Error: l.Error, Raw: raw})
	}

	return lines
}

// First is the first line after the mark whose message is msg.
func (m LogMark) First(msg string) (LogLine, bool) {
	for _, l := range m.Lines() {
		if l.Msg == msg {
			return l, true
		}
	}

	return LogLine{}, false
}

// All are the lines after the mark whose message is msg.
func (m LogMark) All(msg string) []LogLine {
	var out []LogLine

	for _, l := range m.Lines() {
		if l.Msg == msg {
			out = append(out, l)
		}
	}

	return out
}
