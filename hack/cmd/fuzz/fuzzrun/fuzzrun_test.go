package fuzzrun_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/hack/cmd/fuzz/fuzzrun"
)

func TestParse(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		out  string
		want fuzzrun.Result
	}{
		{
			name: "clean run",
			out: `fuzz: elapsed: 0s, gathering baseline coverage: 0/12 completed
fuzz: elapsed: 0s, gathering baseline coverage: 12/12 completed, now fuzzing with 2 workers
fuzz: elapsed: 3s, execs: 41210 (13735/sec), new interesting: 4 (total: 16)
fuzz: elapsed: 10s, execs: 131077 (12843/sec), new interesting: 7 (total: 19)
PASS
ok  	github.com/anvil-metal/anvil/provider/internal/pxe	10.214s
`,
			want: fuzzrun.Result{Execs: 131077, Elapsed: 10 * time.Second, Interesting: 7},
		},
		{
			name: "crasher",
			out: `fuzz: elapsed: 2s, execs: 5000 (2500/sec), new interesting: 1 (total: 3)
--- FAIL: FuzzX (2.31s)
    --- FAIL: FuzzX (0.00s)
        testing.go:1591: panic: runtime error: index out of range

    Failing input written to testdata/fuzz/FuzzX/582528ddfad69eb5
    To re-run:
    go test -run=FuzzX/582528ddfad69eb5
FAIL
`,
			want: fuzzrun.Result{Execs: 5000, Elapsed: 2 * time.Second, Interesting: 1, Crashers: []string{"testdata/fuzz/FuzzX/582528ddfad69eb5"}},
		},
		{
			name: "old format without interesting",
			out:  "fuzz: elapsed: 4s, execs: 100 (25/sec)\n",
			want: fuzzrun.Result{Execs: 100, Elapsed: 4 * time.Second},
		},
		{name: "build failure", out: "# pkg\n./x.go:1: syntax error\nFAIL\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.want, fuzzrun.Parse([]byte(tc.out)))
		})
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()

	var b strings.Builder

	err := fuzzrun.WriteTable(&b, []fuzzrun.Result{
		{Target: fuzzrun.Target{Pkg: "./p", Name: "FuzzA"}, Execs: 1000, Elapsed: 10 * time.Second, Interesting: 3},
		{Target: fuzzrun.Target{Pkg: "./q", Name: "FuzzB"}, Crashers: []string{"c"}, Failed: true},
	})
	assert.NoError(t, err)
	assert.Contains(t, b.String(), "./p.FuzzA")
	assert.Regexp(t, `\./p\.FuzzA\s+1000\s+100\s+3\s+0\s+ok`, b.String())
	assert.Regexp(t, `\./q\.FuzzB\s+0\s+0\s+0\s+1\s+FAIL`, b.String())
}
