package testtimes_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/testtimes"
)

func TestParseGoTest(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		out  string
		want []testtimes.Package
	}{
		{
			name: "ok, no test files, coverage, cached",
			out: "?   \tgithub.com/a/b/cmd/x\t[no test files]\n" +
				"ok  \tgithub.com/a/b/pxe\t12.345s\n" +
				"ok  \tgithub.com/a/b/boot\t0.051s\tcoverage: 81.2% of statements\n" +
				"ok  \tgithub.com/a/b/tftp\t(cached)\n",
			want: []testtimes.Package{
				{Name: "github.com/a/b/pxe", Elapsed: 12345 * time.Millisecond},
				{Name: "github.com/a/b/boot", Elapsed: 51 * time.Millisecond},
				{Name: "github.com/a/b/tftp", Note: "cached"},
			},
		},
		{
			name: "failures",
			out: `--- FAIL: TestX (0.31s)
    x_test.go:12: wrong
FAIL
FAIL	github.com/a/b/lifecycle	3.210s
# github.com/a/b/broken
broken/x.go:3:1: syntax error
FAIL	github.com/a/b/broken [build failed]
FAIL	github.com/a/b/setup [setup failed]
panic: test timed out after 15m0s
FAIL	github.com/a/b/slow	900.412s
FAIL
`,
			want: []testtimes.Package{
				{Name: "github.com/a/b/lifecycle", Elapsed: 3210 * time.Millisecond, Failed: true},
				{Name: "github.com/a/b/broken", Failed: true, Note: "build failed"},
				{Name: "github.com/a/b/setup", Failed: true, Note: "setup failed"},
				{Name: "github.com/a/b/slow", Elapsed: 900412 * time.Millisecond, Failed: true},
			},
		},
		{
			name: "a test's own output is not a result",
			out: `=== RUN   TestLabStorm200
    storm_test.go:40: ok  200 machines booted
ok all done in 3s flat
ok  	github.com/a/b/storm	61.5s
`,
			want: []testtimes.Package{{Name: "github.com/a/b/storm", Elapsed: 61500 * time.Millisecond}},
		},
		{
			name: "CRLF, and a package reported twice keeps its last",
			out:  "ok  \tgithub.com/a/b/x\t1.0s\r\nFAIL\tgithub.com/a/b/x\t2.0s\r\n",
			want: []testtimes.Package{{Name: "github.com/a/b/x", Elapsed: 2 * time.Second, Failed: true}},
		},
		{name: "nothing", out: "go: downloading x v1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got, err := testtimes.ParseGoTest(strings.NewReader(tc.out))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParsePhases(t *testing.T) {
	t.Parallel()

	got, err := testtimes.ParsePhases(strings.NewReader("setup 1700000000.5 1700000002 0\n\nlint 1700000002.000000001 1700000093.25 2\n"))
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, "setup", got[0].Name)
	assert.Equal(t, 1500*time.Millisecond, got[0].Wall())
	assert.Equal(t, 0, got[0].Status)
	assert.Equal(t, 91249999999*time.Nanosecond, got[1].Wall())
	assert.Equal(t, 2, got[1].Status)

	for _, bad := range []string{"setup 1 2\n", "setup x 2 0\n", "setup 1 2 ok\n"} {
		_, err := testtimes.ParsePhases(strings.NewReader(bad))
		assert.Error(t, err, "%q", bad)
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()

	for d, want := range map[time.Duration]string{
		0:                         "0.0s",
		51 * time.Millisecond:     "0.1s",
		12345 * time.Millisecond:  "12.3s",
		59960 * time.Millisecond:  "1m00.0s",
		245200 * time.Millisecond: "4m05.2s",
		time.Hour + 2*time.Minute + 3*time.Second: "1h02m03.0s",
	} {
		assert.Equal(t, want, testtimes.Format(d), "%s", d)
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()

	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

	rep := testtimes.Report{
		Module: "github.com/a/b",
		Phases: []testtimes.Phase{
			{Name: "setup", Start: at(0), End: at(1.9)},
			{Name: "lint", Start: at(1.9), End: at(92.9)},
			{Name: "unit", Start: at(92.9), End: at(218.2), Status: 2},
		},
		Runs: []testtimes.Run{
			{Name: "unit", Packages: []testtimes.Package{
				{Name: "github.com/a/b/boot", Elapsed: 51 * time.Millisecond},
				{Name: "github.com/a/b/pxe", Elapsed: 45200 * time.Millisecond},
				{Name: "github.com/a/b/broken", Failed: true, Note: "build failed"},
				{Name: "github.com/a/b/lifecycle", Elapsed: 73 * time.Second, Failed: true},
				{Name: "github.com/other/x", Elapsed: 45200 * time.Millisecond},
			}},
			{Name: "lab", Missing: true},
		},
	}

	var buf bytes.Buffer
	require.NoError(t, testtimes.Write(&buf, rep))

	want := `make test: FAIL in unit (exit 2), after 3m38.2s

phase        wall  result
setup        1.9s  ok
lint      1m31.0s  ok
unit      2m05.3s  FAIL (exit 2)
total     3m38.2s

unit: go test's time per package, slowest first (5 packages, 2 FAILED)
package                   time  result
./lifecycle            1m13.0s  FAIL
./pxe                    45.2s  ok
github.com/other/x       45.2s  ok
./boot                    0.1s  ok
./broken                  0.0s  FAIL (build failed)
total                  2m43.5s  (a sum: go test runs packages side by side)

lab: not run
`
	assert.Equal(t, want, buf.String())

	buf.Reset()
	require.NoError(t, testtimes.Write(&buf, testtimes.Report{
		Phases: []testtimes.Phase{{Name: "setup", Start: at(0), End: at(1)}},
		Runs:   []testtimes.Run{{Name: "unit"}},
	}))
	assert.Contains(t, buf.String(), "make test: ok, 1.0s\n")
	assert.Contains(t, buf.String(), "unit: no package reported a result\n")
}
