package bootparams_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/internal/bootparams"
)

// Real-shaped secrets: the agent's and the metadata token (internal/token, v1.payload.mac)
// and Omni's v2 join token, URL-escaped as Omni writes it into siderolink.api.
const (
	agentToken = "v1.eyJrIjoiYWdlbnQiLCJtIjoiNGM0YyIsImkiOjE3MDB9.Qm9vdFRva2VuU2lnbmF0dXJlMTIzNDU2Nzg5MA"
	metaToken  = "v1.eyJrIjoibWV0YWRhdGEiLCJtIjoiNGM0YyIsImIiOiJhMSJ9.TWV0YWRhdGFTaWduYXR1cmU5ODc2NTQzMjE"
	joinToken  = "v2%3AeyJ0b2tlbiI6IjEyMzQ1Njc4OTAiLCJzaWduYXR1cmUiOiJhYmMifQ%3D%3D"

	agentArgs = "console=ttyS0 talos.platform=metal " +
		"siderolink.api=grpc://10.77.0.3:8090?jointoken=" + joinToken + " " +
		"talos.events.sink=[fdae:41e4:649b:9303::1]:8091 talos.logging.kernel=tcp://[fdae:41e4:649b:9303::1]:8092 " +
		"anvil.provider=10.77.0.1:50042 anvil.ca=5e4b0f7c anvil.machine=4c4c4544-0042-3510-8052-b4c04f4e3732 " +
		"anvil.token=" + agentToken

	agentArgsRedacted = "console=ttyS0 talos.platform=metal " +
		"siderolink.api=grpc://10.77.0.3:8090?jointoken=<redacted> " +
		"talos.events.sink=[fdae:41e4:649b:9303::1]:8091 talos.logging.kernel=tcp://[fdae:41e4:649b:9303::1]:8092 " +
		"anvil.provider=10.77.0.1:50042 anvil.ca=5e4b0f7c anvil.machine=4c4c4544-0042-3510-8052-b4c04f4e3732 " +
		"anvil.token=<redacted>"
)

func TestRedact(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct{ name, in, want string }{
		{
			name: "x86's early command line, as the kernel logs it",
			in:   "Command line: BOOT_IMAGE=vmlinuz initrd=initramfs.xz " + agentArgs + "\n",
			want: "Command line: BOOT_IMAGE=vmlinuz initrd=initramfs.xz " + agentArgsRedacted + "\n",
		},
		{
			name: "Kernel command line",
			in:   "Kernel command line: " + agentArgs + "\n",
			want: "Kernel command line: " + agentArgsRedacted + "\n",
		},
		{
			// Linux 6.18 wraps a long line at spaces (CONFIG_CMDLINE_LOG_WRAP_IDEAL_LEN).
			name: "Kernel command line, wrapped",
			in:   "Kernel command line: anvil.machine=4c4c anvil.token=" + agentToken + " \\\n",
			want: "Kernel command line: anvil.machine=4c4c anvil.token=<redacted> \\\n",
		},
		{
			name: "the parameters the kernel passes on to init, quoted",
			in:   `Unknown kernel command line parameters "anvil.machine=4c4c anvil.token=` + agentToken + `", will be passed to user space.` + "\n",
			want: `Unknown kernel command line parameters "anvil.machine=4c4c anvil.token=<redacted>", will be passed to user space.` + "\n",
		},
		{
			name: "init's environment, one record each",
			in:   "    anvil.token=" + agentToken + "\n",
			want: "    anvil.token=<redacted>\n",
		},
		{
			name: "Talos' line: the metadata URL's token",
			in: "Kernel command line: talos.platform=metal console=ttyS0 init_on_alloc=1 " +
				"talos.config=http://10.77.0.1:50080/metadata/4c4c4544?token=" + metaToken + " talos.events.sink=10.77.0.1:50042\n",
			want: "Kernel command line: talos.platform=metal console=ttyS0 init_on_alloc=1 " +
				"talos.config=http://10.77.0.1:50080/metadata/4c4c4544?token=<redacted> talos.events.sink=10.77.0.1:50042\n",
		},
		{
			name: "an iPXE script's kernel line",
			in:   "#!ipxe\nimgfree\nkernel http://10.77.0.1:50080/assets/vmlinuz initrd=initramfs.xz " + agentArgs + "\ninitrd http://10.77.0.1:50080/assets/initramfs.xz\nboot\n",
			want: "#!ipxe\nimgfree\nkernel http://10.77.0.1:50080/assets/vmlinuz initrd=initramfs.xz " + agentArgsRedacted + "\ninitrd http://10.77.0.1:50080/assets/initramfs.xz\nboot\n",
		},
		{
			name: "the agent's own log line, JSON fields",
			in:   `[   12.345] INFO  omni  join config {"kernel_args": ["siderolink.api=grpc://omni:8090?jointoken=` + joinToken + `", "talos.events.sink=[fdae::1]:8091"]}`,
			want: `[   12.345] INFO  omni  join config {"kernel_args": ["siderolink.api=grpc://omni:8090?jointoken=<redacted>", "talos.events.sink=[fdae::1]:8091"]}`,
		},
		{
			name: "a query parameter among others",
			in:   "siderolink.api=https://omni.example:443?grpc_tunnel=false&jointoken=" + joinToken + "&x=1",
			want: "siderolink.api=https://omni.example:443?grpc_tunnel=false&jointoken=<redacted>&x=1",
		},
		{
			name: "a URL's password",
			in:   "kernel https://anvil:s3cr3t-pw@factory.example/image/0123/v1.9.0/kernel-amd64 initrd=initramfs-amd64.xz",
			want: "kernel https://anvil:<redacted>@factory.example/image/0123/v1.9.0/kernel-amd64 initrd=initramfs-amd64.xz",
		},
		{
			name: "a site's own secret arguments",
			in:   "ipmi.password=hunter2 BMC_PASSWD=hunter3 vendor.api_secret=x1 Auth-Token=t0",
			want: "ipmi.password=<redacted> BMC_PASSWD=<redacted> vendor.api_secret=<redacted> Auth-Token=<redacted>",
		},
		{
			name: "already redacted",
			in:   "anvil.token=<redacted> siderolink.api=grpc://omni:8090?jointoken=<redacted>",
			want: "anvil.token=<redacted> siderolink.api=grpc://omni:8090?jointoken=<redacted>",
		},
		{name: "no value", in: "anvil.token= jointoken=", want: "anvil.token= jointoken="},
		{name: "a name that only starts like one", in: "anvil.tokens=1 anvil.tokenizer=2", want: "anvil.tokens=1 anvil.tokenizer=2"},
		{name: "a user without password", in: "http://anvil@factory.example/x", want: "http://anvil@factory.example/x"},
		{name: "nothing secret", in: "virtio_net virtio0 enp0s2: renamed from eth0\n", want: "virtio_net virtio0 enp0s2: renamed from eth0\n"},
		{name: "empty", in: "", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got := bootparams.Redact(tc.in)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, got, bootparams.Redact(got), "redacting twice changes nothing")

			for _, secret := range []string{agentToken, metaToken, joinToken, "hunter2", "s3cr3t-pw"} {
				assert.NotContains(t, got, secret)
			}
		})
	}
}

func TestSecrets(t *testing.T) {
	t.Parallel()

	assert.Equal(t, []string{joinToken, "v2:eyJ0b2tlbiI6IjEyMzQ1Njc4OTAiLCJzaWduYXR1cmUiOiJhYmMifQ==", agentToken},
		bootparams.Secrets(agentArgs+"\n"))
	assert.Empty(t, bootparams.Secrets("console=ttyS0 talos.platform=metal\n"))
}

// TestRedactValues: a secret the agent knows is hidden wherever a record quotes it, and
// where the kernel split a line in two records (a continuation it could not append) —
// the name in one and the value in the next, or the value cut in two.
func TestRedactValues(t *testing.T) {
	t.Parallel()

	secrets := bootparams.Secrets(agentArgs)
	half := len(agentToken) / 2

	for _, tc := range []struct{ name, in, want string }{
		{
			name: "quoted bare",
			in:   "[   3.2] WARN  agent  the provider refused token " + agentToken + "\n",
			want: "[   3.2] WARN  agent  the provider refused token <redacted>\n",
		},
		{
			name: "the name cut off: its value begins the next record",
			in:   "en=" + agentToken + " anvil.machine=4c4c\n",
			want: "en=<redacted> anvil.machine=4c4c\n",
		},
		{
			name: "a value's first half ends a record",
			in:   "Kernel command line: anvil.machine=4c4c " + agentToken[:half] + "\n",
			want: "Kernel command line: anvil.machine=4c4c <redacted>\n",
		},
		{
			name: "a value's first half ends a record, its name cut",
			in:   "Kernel command line: anvil.machine=4c4c en=" + agentToken[:half] + "\n",
			want: "Kernel command line: anvil.machine=4c4c en=<redacted>\n",
		},
		{
			name: "a value's second half begins the next",
			in:   agentToken[half:] + " talos.platform=metal\n",
			want: "<redacted> talos.platform=metal\n",
		},
		{
			name: "the join token, unescaped",
			in:   `siderolink: provisioning with token v2:eyJ0b2tlbiI6IjEyMzQ1Njc4OTAiLCJzaWduYXR1cmUiOiJhYmMifQ==`,
			want: `siderolink: provisioning with token <redacted>`,
		},
		{
			// A word that merely shares a few bytes with a secret's end stays.
			name: "too short to tell",
			in:   agentToken[len(agentToken)-3:] + " and " + agentToken[:3] + "\n",
			want: agentToken[len(agentToken)-3:] + " and " + agentToken[:3] + "\n",
		},
		{name: "nothing secret", in: "Unknown kernel command line parameters\n", want: "Unknown kernel command line parameters\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			assert.Equal(t, tc.want, bootparams.RedactValues(tc.in, secrets))
		})
	}
}

// TestNoAllocation: a record with nothing secret costs no allocation; the kernel log
// passes through record by record while the machine boots.
func TestNoAllocation(t *testing.T) {
	secrets := bootparams.Secrets(agentArgs)
	records := []string{
		"virtio_net virtio0 enp0s2: renamed from eth0\n",
		"Kernel command line: console=ttyS0 talos.platform=metal anvil.machine=4c4c\n",
		"pci 0000:00:02.0: [1af4:1000] type 00 class 0x020000 conventional PCI endpoint\n",
		"EXT4-fs (sda1): mounted filesystem with ordered data mode. Quota mode: none. url=http://10.0.0.1/x\n",
	}

	allocs := testing.AllocsPerRun(100, func() {
		for _, r := range records {
			if bootparams.RedactValues(bootparams.Redact(r), secrets) != r {
				t.Fatal("changed")
			}
		}
	})

	assert.Zero(t, allocs)
}

func BenchmarkRedactRecord(b *testing.B) {
	secrets := bootparams.Secrets(agentArgs)
	record := "pci 0000:00:02.0: [1af4:1000] type 00 class 0x020000 conventional PCI endpoint " + strings.Repeat("x=1 ", 20) + "\n"

	b.ReportAllocs()

	for b.Loop() {
		bootparams.RedactValues(bootparams.Redact(record), secrets)
	}
}
