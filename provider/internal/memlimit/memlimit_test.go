package memlimit_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/anvil-metal/anvil/provider/internal/memlimit"
)

func parse(s string) (int64, error) {
	if s == "1GiB" {
		return 1 << 30, nil
	}

	return 0, errors.New("invalid size " + strconv.Quote(s))
}

func TestResolve(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		given   string
		cgroup  string
		files   map[string]string
		want    int64
		source  memlimit.Source
		wantErr bool
	}{
		{name: "given wins over the cgroup", given: "1GiB", cgroup: "0::/\n", files: map[string]string{"memory.max": "2147483648"}, want: 1 << 30, source: memlimit.SourceFlag},
		{name: "given but malformed", given: "lots", wantErr: true},
		{name: "no cgroup files", want: 0, source: memlimit.SourceNone},
		{name: "v2 unlimited", cgroup: "0::/\n", files: map[string]string{"memory.max": "max"}, source: memlimit.SourceNone},
		{name: "v2 namespaced root", cgroup: "0::/\n", files: map[string]string{"memory.max": "1000000000"}, want: 900000000, source: memlimit.SourceCgroup},
		{
			name: "v2 unit's own cgroup", cgroup: "0::/system.slice/anvil.service\n",
			files: map[string]string{"system.slice/anvil.service/memory.max": "2000000000"}, want: 1800000000, source: memlimit.SourceCgroup,
		},
		{
			name: "v1 memory controller", cgroup: "4:memory:/process/x\n1:cpu:/\n0::/\n",
			files: map[string]string{"memory/process/x/memory.limit_in_bytes": "500000000"}, want: 450000000, source: memlimit.SourceCgroup,
		},
		{
			name: "v1 unlimited", cgroup: "4:cpuacct,memory:/x\n",
			files: map[string]string{"memory/x/memory.limit_in_bytes": "9223372036854771712"}, source: memlimit.SourceNone,
		},
		{name: "damaged limit file", cgroup: "0::/\n", files: map[string]string{"memory.max": "a lot"}, wantErr: true},
		{name: "damaged cgroup lines are skipped", cgroup: "garbage\n0::/\n", files: map[string]string{"memory.max": "100"}, want: 90, source: memlimit.SourceCgroup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			dir := t.TempDir()
			sys := memlimit.FS{ProcSelfCgroup: filepath.Join(dir, "cgroup"), CgroupRoot: filepath.Join(dir, "sys")}

			if tc.cgroup != "" {
				write(t, sys.ProcSelfCgroup, tc.cgroup)
			}

			for name, content := range tc.files {
				write(t, filepath.Join(sys.CgroupRoot, name), content)
			}

			got, source, err := memlimit.Resolve(tc.given, parse, sys)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want an error, got %d from %s", got, source)
				}

				return
			}

			if err != nil {
				t.Fatal(err)
			}

			if got != tc.want || source != tc.source {
				t.Fatalf("got %d from %s, want %d from %s", got, source, tc.want, tc.source)
			}
		})
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
