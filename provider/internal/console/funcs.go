package console

import (
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/internal/bootparams"
	"github.com/anvil-metal/anvil/provider/internal/fleet"
)

// funcs are the templates' helpers.
func funcs(now func() time.Time) template.FuncMap {
	return template.FuncMap{
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}

			return shortDuration(now().Sub(t)) + " ago"
		},
		"stamp": func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}

			return t.Local().Format("2006-01-02 15:04:05")
		},
		"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"dur": shortDuration,
		"ms": func(ms uint64) string {
			return shortDuration(time.Duration(min(ms, math.MaxInt64/uint64(time.Millisecond))) * time.Millisecond)
		},
		"size": fleet.DiskSize,
		"mem":  fleet.Memory,
		"join": strings.Join,
		// redact hides secrets in text an agent, a BMC or Omni wrote (kernel args, error
		// and event messages): a token on a kernel line, a password in a URL.
		"redact": bootparams.Redact,
		"dash": func(s string) string {
			if s == "" {
				return "-"
			}

			return s
		},
		"mbps": func(m int64) string {
			switch {
			case m <= 0:
				return "-"
			case m >= 1000:
				return strconv.FormatFloat(float64(m)/1000, 'f', -1, 64) + " Gb/s"
			default:
				return strconv.FormatInt(m, 10) + " Mb/s"
			}
		},
	}
}

// shortDuration is a duration as people read one: "850ms", "12.4s", "3m12s", "2h5m".
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
}
