package boot_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/boot"
)

func TestParseQuery(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		query   string
		want    boot.Request
		wantErr string
	}{
		{
			query: "uuid=4C4C4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=i386&platform=pcbios",
			want:  boot.Request{MachineID: "4c4c4544-0000-1000-8000-000000000001", UUID: "4c4c4544-0000-1000-8000-000000000001", MAC: "52:54:00:12:34:56", Arch: "amd64", Firmware: "bios"},
		},
		{
			query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52:54:00:12:34:56&arch=x86_64&platform=efi",
			want:  boot.Request{MachineID: "4c4c4544-0000-1000-8000-000000000001", UUID: "4c4c4544-0000-1000-8000-000000000001", MAC: "52:54:00:12:34:56", Arch: "amd64", Firmware: "uefi"},
		},
		{
			query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=arm64&platform=efi",
			want:  boot.Request{MachineID: "4c4c4544-0000-1000-8000-000000000001", UUID: "4c4c4544-0000-1000-8000-000000000001", MAC: "52:54:00:12:34:56", Arch: "arm64", Firmware: "uefi"},
		},
		{
			query: "uuid=00000000-0000-0000-0000-000000000000&mac=52-54-00-12-34-56&arch=x86_64&platform=efi",
			want:  boot.Request{MachineID: "mac-525400123456", UUID: "00000000-0000-0000-0000-000000000000", MAC: "52:54:00:12:34:56", Arch: "amd64", Firmware: "uefi"},
		},
		{
			query: "uuid=FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF&mac=52-54-00-12-34-56&arch=x86_64&platform=efi",
			want:  boot.Request{MachineID: "mac-525400123456", UUID: "ffffffff-ffff-ffff-ffff-ffffffffffff", MAC: "52:54:00:12:34:56", Arch: "amd64", Firmware: "uefi"},
		},
		{query: "mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "missing uuid"},
		{query: "uuid=&mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "missing uuid"},
		{query: "uuid=not-a-uuid&mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "invalid uuid"},
		{query: "uuid=4c4c4544x0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "invalid uuid"},
		{query: "uuid=4c4c4544-0000-1000-8000-00000000000g&mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "invalid uuid"},
		{query: "uuid=${uuid}&mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "invalid uuid"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&arch=i386&platform=pcbios", wantErr: "missing mac"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34&arch=i386&platform=pcbios", wantErr: "invalid mac"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=00-00-00-00-fe-80-00-00-00-00-00-00-02-00-5e-10-00-00-00-01&arch=i386&platform=pcbios", wantErr: "invalid mac"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&platform=pcbios", wantErr: "missing arch"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=riscv64&platform=efi", wantErr: "unsupported arch"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=i386", wantErr: "missing platform"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=i386&platform=xen", wantErr: "unknown platform"},
		{query: "uuid=%zz", wantErr: "malformed query"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&pad=" + strings.Repeat("x", boot.MaxQueryLength), wantErr: "longer than"},
	} {
		t.Run(tc.query[:min(len(tc.query), 60)], func(t *testing.T) {
			t.Parallel()

			got, err := boot.ParseQuery(tc.query)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, boot.ErrBadRequest)
				assert.ErrorContains(t, err, tc.wantErr)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func FuzzParseQuery(f *testing.F) {
	f.Add("uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=i386&platform=pcbios")
	f.Add("uuid=00000000-0000-0000-0000-000000000000&mac=52:54:00:12:34:56&arch=arm64&platform=efi")
	f.Add("uuid=%zz&&&=")

	f.Fuzz(func(t *testing.T, q string) {
		req, err := boot.ParseQuery(q)
		if err != nil {
			return
		}

		// Whatever parses must be safe to put in a URL path, a script and a resource ID.
		for _, s := range []string{req.MachineID, req.MAC, req.Arch, req.Firmware} {
			if s == "" || strings.ContainsAny(s, " \n\r/${}&?") {
				t.Fatalf("unsafe field %q parsed from %q", s, q)
			}
		}
	})
}

// referenceParseQuery is ParseQuery as it was over url.ParseQuery and net.ParseMAC:
// the fast parser must accept, refuse and normalise exactly as it did.
func referenceParseQuery(rawQuery string) (boot.Request, error) {
	if len(rawQuery) > boot.MaxQueryLength {
		return boot.Request{}, fmt.Errorf("%w: query longer than %d bytes", boot.ErrBadRequest, boot.MaxQueryLength)
	}

	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return boot.Request{}, fmt.Errorf("%w: malformed query", boot.ErrBadRequest)
	}

	var req boot.Request

	s := q.Get("mac")
	if s == "" {
		return boot.Request{}, fmt.Errorf("%w: missing mac", boot.ErrBadRequest)
	}

	hw, err := net.ParseMAC(strings.ReplaceAll(s, "-", ":"))
	if err != nil || len(hw) != 6 {
		return boot.Request{}, fmt.Errorf("%w: invalid mac %.32q", boot.ErrBadRequest, s)
	}

	req.MAC = hw.String()

	// The rest goes through the same code: the query carries only those fields.
	rest, err := boot.ParseQuery(url.Values{
		"uuid": {q.Get("uuid")}, "mac": {req.MAC}, "arch": {q.Get("arch")}, "platform": {q.Get("platform")},
	}.Encode())
	if err != nil {
		return boot.Request{}, err
	}

	rest.MAC = req.MAC

	return rest, nil
}

func TestParseQueryMatchesURLParseQuery(t *testing.T) {
	t.Parallel()

	const uuid = "4c4c4544-0000-1000-8000-000000000001"

	queries := []string{
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&arch=i386&platform=pcbios",
		"uuid=" + uuid + "&mac=52%2D54-00-12-34-56&arch=i%33%386&platform=pc%62ios",
		"uuid=" + uuid + "&mac=52:54:00:AB:cd:Ef&arch=x86_64&platform=efi",
		"uuid=" + uuid + "&mac=52-54:00-12:34-56&arch=x86_64&platform=efi",
		"uuid=" + uuid + "&mac=5254.0012.3456&arch=x86_64&platform=efi",
		"uuid=" + uuid + "&mac=52-54-00-12-34-5g&arch=x86_64&platform=efi",
		"uuid=" + uuid + "&mac=52_54_00_12_34_56&arch=x86_64&platform=efi",
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&mac=zz&arch=x86_64&arch=arm64&platform=efi",
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&arch=x86_64&platform=efi;x=1",
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&arch=x86_64&platform=efi&x=%zz",
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&arch=x86_64&platform=efi&%zz=1",
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&arch=x86+64&platform=efi",
		"uuid=" + uuid + "&&mac=52-54-00-12-34-56&=&arch&arch=x86_64&platform=efi&",
		"u%75id=" + uuid + "&mac=52-54-00-12-34-56&arch=x86_64&platform=efi",
		"uuid=" + uuid + "&mac=&arch=x86_64&platform=efi",
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&arch=&platform=efi",
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&arch=x86_64&platform=",
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&arch=x86_64&platform=%00",
		"uuid=" + strings.ToUpper(uuid) + "&mac=52-54-00-12-34-56&arch=arm64&platform=efi",
		"uuid=00000000-0000-0000-0000-000000000000&mac=52-54-00-12-34-56&arch=x86_64&platform=efi",
		"",
		"&",
		";",
		"%",
		"mac=52-54-00-12-34-56",
	}

	// And random mixes of those queries' pieces.
	var pieces []string
	for _, q := range queries {
		pieces = append(pieces, strings.Split(q, "&")...)
	}

	rng := rand.New(rand.NewPCG(1, 2)) // a fixed, reproducible mix

	for range 5000 {
		parts := make([]string, rng.IntN(7))
		for i := range parts {
			parts[i] = pieces[rng.IntN(len(pieces))]
		}

		queries = append(queries, strings.Join(parts, "&"))
	}

	for _, q := range queries {
		got, err := boot.ParseQuery(q)
		want, wantErr := referenceParseQuery(q)

		if wantErr != nil {
			require.Error(t, err, q)
			assert.Equal(t, wantErr.Error(), err.Error(), q)

			continue
		}

		require.NoError(t, err, q)
		assert.Equal(t, want, got, q)
	}
}

func BenchmarkParseQuery(b *testing.B) {
	const q = "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=x86_64&platform=efi"

	b.ReportAllocs()

	for b.Loop() {
		if _, err := boot.ParseQuery(q); err != nil {
			b.Fatal(err)
		}
	}
}
