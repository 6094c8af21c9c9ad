package kmsglog

import (
	"bufio"
	"context"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/go-kmsg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/bootparams"
)

// A machine's secrets, shaped as the provider and Omni make them.
const (
	agentToken = "v1.eyJrIjoiYWdlbnQiLCJtIjoiNGM0YyIsImkiOjE3MDB9.Qm9vdFRva2VuU2lnbmF0dXJlMTIzNDU2Nzg5MA"
	joinToken  = "v2%3AeyJ0b2tlbiI6IjEyMzQ1Njc4OTAiLCJzaWduYXR1cmUiOiJhYmMifQ%3D%3D"
	cmdline    = "console=ttyS0 talos.platform=metal siderolink.api=grpc://10.77.0.3:8090?jointoken=" + joinToken +
		" talos.events.sink=[fdae::1]:8091 talos.logging.kernel=tcp://[fdae::1]:8092" +
		" anvil.provider=10.77.0.1:50042 anvil.ca=5e4b0f7c anvil.machine=4c4c4544 anvil.token=" + agentToken
)

// TestShipsNoSecret ships a boot's records that quote the command line — the kernel's
// lines, whole, wrapped, quoted, one per init's environment variable, cut in two by a
// continuation the kernel could not append, and the agent's own — and finds no secret,
// nor any piece of one, in what reaches the receiver.
func TestShipsNoSecret(t *testing.T) {
	t.Parallel()

	half := len(agentToken) / 2
	records := []string{
		"Linux version 6.18.1-talos (root@buildkitsandbox) #1 SMP\n",
		"Command line: BOOT_IMAGE=vmlinuz initrd=initramfs.xz " + cmdline + "\n",
		"Kernel command line: " + cmdline + "\n",
		"Kernel command line: console=ttyS0 siderolink.api=grpc://10.77.0.3:8090?jointoken=" + joinToken + " \\\n",
		"Kernel command line: anvil.machine=4c4c4544 anvil.token=" + agentToken + "\n",
		`Unknown kernel command line parameters "anvil.machine=4c4c4544 anvil.token=` + agentToken + `", will be passed to user space.` + "\n",
		"    anvil.token=" + agentToken + "\n",
		// A line split where its name ends, and again in its value.
		"Kernel command line: anvil.machine=4c4c4544 anvil.tok\n",
		"en=" + agentToken[:half] + "\n",
		agentToken[half:] + " talos.platform=metal\n",
		`[    4.021] INFO  omni  joining {"kernel_args": ["siderolink.api=grpc://10.77.0.3:8090?jointoken=` + joinToken + `"]}` + "\n",
		"virtio_net virtio0 enp0s2: renamed from eth0\n",
	}

	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)

	defer lis.Close()

	dest, err := url.Parse("tcp://" + lis.Addr().String())
	require.NoError(t, err)

	r := newFakeReader()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)

	go func() {
		done <- Run(ctx, Options{URL: dest, Reader: r, Logger: zap.NewNop(), Secrets: bootparams.Secrets(cmdline)})
	}()

	go func() {
		for i, msg := range records {
			select {
			case r.ch <- kmsg.Packet{Message: kmsg.Message{Message: msg, Facility: kmsg.Kern, Priority: kmsg.Notice, SequenceNumber: int64(i), Timestamp: boot}}:
			case <-ctx.Done():
				return
			}
		}
	}()

	c, err := lis.Accept()
	require.NoError(t, err)

	defer c.Close()

	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))

	in := bufio.NewReader(c)

	var shipped, msgs strings.Builder

	for range records {
		s, err := in.ReadString('\n')
		require.NoError(t, err)

		shipped.WriteString(s)
		msgs.WriteString(decode(t, s).Msg)
	}

	cancel()
	require.NoError(t, <-done)

	unescaped, err := url.QueryUnescape(joinToken)
	require.NoError(t, err)

	// No 8 bytes in a row of any secret, escaped by JSON or not.
	for _, secret := range []string{agentToken, joinToken, unescaped} {
		for i := 0; i+8 <= len(secret); i++ {
			require.NotContains(t, shipped.String(), secret[i:i+8])
			require.NotContains(t, msgs.String(), secret[i:i+8])
		}
	}

	assert.Contains(t, msgs.String(), "Kernel command line: console=ttyS0 talos.platform=metal siderolink.api=grpc://10.77.0.3:8090?jointoken=<redacted> ")
	assert.Contains(t, msgs.String(), "anvil.machine=4c4c4544 anvil.token=<redacted>\n")
	assert.Contains(t, msgs.String(), "virtio_net virtio0 enp0s2: renamed from eth0\n", "the rest goes as it was")
}
