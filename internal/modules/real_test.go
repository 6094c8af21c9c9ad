package modules

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realIndex opens a Debian kernel's depmod output from the host, as
// `apt-get install linux-image-amd64` leaves it.
func realIndex(tb testing.TB) *Index {
	tb.Helper()

	dirs, _ := filepath.Glob("/lib/modules/*-amd64/modules.alias")
	if len(dirs) == 0 {
		tb.Skip("no Debian kernel modules under /lib/modules (apt-get install linux-image-amd64)")
	}

	start := time.Now()
	ix, err := Open(filepath.Dir(dirs[0]))
	require.NoError(tb, err)
	tb.Logf("opened %s in %v", ix.Dir(), time.Since(start))

	return ix
}

// qemuModaliases are what a q35 QEMU guest with a virtio NIC and disk shows.
var qemuModaliases = []string{
	"pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00",
	"pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00",
	"pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01",
	"pci:v00008086d000029C0sv00001AF4sd00001100bc06sc00i00",
	"pci:v00008086d00002918sv00001AF4sd00001100bc06sc01i00",
	"pci:v00001234d00001111sv00001AF4sd00001100bc03sc00i00",
	"virtio:d00000001v00001AF4",
	"virtio:d00000002v00001AF4",
	"acpi:PNP0A08:PNP0A03:",
	"acpi:PNP0501:",
	"acpi:IPI0001:",
	"platform:serial8250",
	"dmi:bvnSeaBIOS:bvr1.16.2-debian-1.16.2-1:bd04/01/2014:br0.0:svnQEMU:pnStandardPC(Q35+ICH9,2009):pvrpc-q35-7.2:cvnQEMU:ct1:cvrpc-q35-7.2:sku:",
	"cpu:type:x86,ven0002fam0006mod0055:feature:,0000,0001,0002,0003,0004,0005,0006,0007,0008,0009,000B,000C,000D,000E,000F,0010,0011,0013,0015,0016,0017,0018,0019,001A,001B,001C,001D,001F,002B,0034,003A,003B,003D,0068,006A,006B,006C,006D,006F,0070,0072,0074,0075,0076,0078,0079,007C,0080,0081,0082,0083,0084,0085,0087,0088,0089,008B,008C,008D,008E,008F,0091,0092,0093,0094,0095,0096,0097,0098,0099,009A,009B,009C,009D,009E,00C0,00C5,00E1,00E3,00E4,00E6,00E7,00EB,00EC,00F0,00F1,00F3,00F5,00F6,00F9,00FA,00FB,00FD,00FF,0100,0101,0102,0103,0111,0120,0121,0123,0125,0126,0127,0128,0129,012A,012D,012E,012F,0130,0131,0132,0133,0134,0137,0138,0139,013C,013E,013F,0140,0141,0142,0143,0160,0161,0162,0163,0164,0165,0171,01C0,01C1,01C2,01C4,01C5,01C6,024A,025A,025B,025C,025D,025F",
}

func TestRealAliases(t *testing.T) {
	t.Parallel()

	ix := realIndex(t)

	assert.Equal(t, []string{"virtio_pci"}, ix.Match("pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00"))
	assert.Equal(t, []string{"virtio_net"}, ix.Match("virtio:d00000001v00001AF4"))
	assert.Equal(t, []string{"virtio_blk"}, ix.Match("virtio:d00000002v00001AF4"))
	assert.Contains(t, ix.Match("pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01"), "ahci")
	assert.Contains(t, ix.Match("acpi:IPI0001:"), "ipmi_si")

	closure, err := ix.Closure("virtio_net")
	require.NoError(t, err)
	require.NotEmpty(t, closure)
	assert.Equal(t, "virtio_net", closure[len(closure)-1].Name)
	assert.FileExists(t, closure[len(closure)-1].File)

	for _, n := range Always {
		if ix.Builtin(n) {
			continue
		}

		_, err := ix.Closure(n)
		assert.NoError(t, err, n)
	}

	// How long matching takes is a benchmark's business, not a test's: logged only.
	start := time.Now()
	const rounds = 100
	for range rounds {
		for _, m := range qemuModaliases {
			ix.Match(m)
		}
	}

	t.Logf("matched %d modaliases against the real modules.alias in %v", len(qemuModaliases), time.Since(start)/rounds)
}

// TestRealHost matches this host's own sysfs against the real index,
// reading only: nothing is inserted.
func TestRealHost(t *testing.T) {
	t.Parallel()

	ix := realIndex(t)

	start := time.Now()
	aliases, err := Modaliases("/sys/devices")
	require.NoError(t, err)

	scan := time.Since(start)

	var wanted []string
	for _, a := range aliases {
		wanted = append(wanted, ix.Match(a)...)
	}

	t.Logf("host: %d modaliases scanned in %v, %d modules matched in %v total", len(aliases), scan, len(wanted), time.Since(start))
}

func BenchmarkRealMatch(b *testing.B) {
	ix := realIndex(b)

	for b.Loop() {
		for _, m := range qemuModaliases {
			ix.Match(m)
		}
	}
}

func BenchmarkRealOpen(b *testing.B) {
	dir := realIndex(b).Dir()

	for b.Loop() {
		if _, err := Open(dir); err != nil {
			b.Fatal(err)
		}
	}
}
