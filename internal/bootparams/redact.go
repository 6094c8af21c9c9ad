package bootparams

import (
	"net/url"
	"strings"
)

// Redacted stands for a secret's value wherever a kernel line is shown: the kernel log
// shipped to Omni, the KernelCmdline resource, the provider's logs and web console.
const Redacted = "<redacted>"

// Secrets on a kernel line, by the name of the parameter or URL query parameter that
// holds each: a name ending in one of these (case-insensitive) has a secret value. They
// cover what the provider puts there — the agent's per-boot token (anvil.token=), Omni's
// join token (siderolink.api=…?jointoken=), the metadata token (talos.config=…?token=)
// — and whatever a site's or an allocation's kernel arguments carry under such a name.
// A URL's user info password (scheme://user:password@host) is secret too.
var secretSuffixes = [...]string{"token", "password", "passwd", "secret"}

// Redact returns s with the value of every secret parameter in it replaced by Redacted
// (see secretSuffixes): s may be a kernel command line, a kernel log record, an iPXE
// script or any text that quotes one. Where there is none, s itself comes back, with no
// allocation: the kernel log goes through here record by record.
func Redact(s string) string {
	var b strings.Builder

	last := 0

	for from := 0; ; {
		start, end, ok := nextSecret(s, from)
		if !ok {
			break
		}

		if b.Len() == 0 {
			b.Grow(len(s))
		}

		b.WriteString(s[last:start])
		b.WriteString(Redacted)
		last, from = end, end
	}

	if last == 0 {
		return s
	}

	b.WriteString(s[last:])

	return b.String()
}

// Secrets returns the secret values on a kernel command line (those Redact hides), each
// as the line has it and, where that differs, URL-unescaped: what a log that quotes one
// of them, whole or cut off, must not show (see RedactValues).
func Secrets(cmdline string) []string {
	var out []string

	for from := 0; ; {
		start, end, ok := nextSecret(cmdline, from)
		if !ok {
			return out
		}

		v := cmdline[start:end]
		out = append(out, v)

		if u, err := url.QueryUnescape(v); err == nil && u != v {
			out = append(out, u)
		}

		from = end
	}
}

// minFragment is the shortest part of a secret RedactValues hides at the edge of a
// record: shorter, it would hide innocent words by chance and give little away.
const minFragment = 4

// RedactValues returns s with each of secrets (values Secrets found) replaced by
// Redacted wherever it occurs, and at s's start and end a part of one that a record
// boundary cut off: the kernel splits a line it cannot append to its last record (a
// continuation, KERN_CONT) into a record of its own, so that a secret's name may end one
// record and its value — or the rest of it — begin the next. s comes back as it is, with
// no allocation, where it holds none.
func RedactValues(s string, secrets []string) string {
	for _, secret := range secrets {
		if len(secret) < minFragment {
			continue
		}

		if strings.Contains(s, secret) {
			s = strings.ReplaceAll(s, secret, Redacted)
		}

		// The rest of a secret begins the record: the run up to the first byte no value
		// holds, if the secret ends with it.
		if head := s[:valueEnd(s, 0)]; len(head) >= minFragment && strings.HasSuffix(secret, head) {
			s = Redacted + s[len(head):]
		}

		// The start of a secret ends it (before the record's newline): the last run, or
		// the part of it after its last '=' (a name and its value cut short).
		body := strings.TrimRight(s, " \t\r\n")
		tail := body[valueStart(body):]

		if i := strings.LastIndexByte(tail, '='); i >= 0 && !strings.HasPrefix(secret, tail) {
			tail = tail[i+1:]
		}

		if len(tail) >= minFragment && strings.HasPrefix(secret, tail) {
			s = body[:len(body)-len(tail)] + Redacted + s[len(body):]
		}
	}

	return s
}

// nextSecret finds the first secret value in s at or after from: s[start:end].
func nextSecret(s string, from int) (start, end int, ok bool) {
	for i := from; i < len(s); i++ {
		switch s[i] {
		case '=':
			if !secretName(s[:i]) {
				continue
			}

			if end := valueEnd(s, i+1); end > i+1 {
				return i + 1, end, true
			}
		case ':':
			// scheme://user:password@host: the password, if the authority has one.
			if !strings.HasPrefix(s[i:], "://") {
				continue
			}

			auth := s[i+3 : authorityEnd(s, i+3)]

			at := strings.LastIndexByte(auth, '@')
			if at < 0 {
				continue
			}

			if colon := strings.IndexByte(auth[:at], ':'); colon >= 0 && colon+1 < at {
				return i + 3 + colon + 1, i + 3 + at, true
			}
		}
	}

	return 0, 0, false
}

// secretName says whether the text before an '=' ends in a secret's name.
func secretName(before string) bool {
	for _, suffix := range secretSuffixes {
		if len(before) >= len(suffix) && strings.EqualFold(before[len(before)-len(suffix):], suffix) {
			return true
		}
	}

	return false
}

// valueEnd is where the value starting at s[from] ends: at the first byte no token or
// password on a kernel line holds — a space or control byte, a URL's '&', or what
// quotes or closes it in a log line. Redacted's '<' is among them, so that Redact leaves
// a value it hid alone.
func valueEnd(s string, from int) int {
	for i := from; i < len(s); i++ {
		if endsValue(s[i]) {
			return i
		}
	}

	return len(s)
}

// valueStart is where the last run of value bytes of s starts.
func valueStart(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if endsValue(s[i]) {
			return i + 1
		}
	}

	return 0
}

func endsValue(c byte) bool {
	if c <= ' ' || c == 0x7f {
		return true
	}

	switch c {
	case '&', '"', '\'', '`', '\\', ';', ',', '<', '>', '(', ')', '[', ']', '{', '}', '|':
		return true
	}

	return false
}

// authorityEnd is where a URL's authority starting at s[from] ends.
func authorityEnd(s string, from int) int {
	for i := from; i < len(s); i++ {
		if c := s[i]; c == '/' || c == '?' || c == '#' || endsValue(c) {
			return i
		}
	}

	return len(s)
}
