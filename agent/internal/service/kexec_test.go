package service

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
)

// TestLoadKexec: the next kernel and initramfs are booted only as the provider said
// they are — a download that does not match its digest, or fails, is refused.
func TestLoadKexec(t *testing.T) {
	t.Parallel()

	files := map[string]string{"/kernel": "KERNEL", "/initramfs": "INITRAMFS"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)

			return
		}

		w.Write([]byte(body)) //nolint:errcheck // a test server
	}))
	t.Cleanup(srv.Close)

	sum := func(s string) string {
		h := sha256.Sum256([]byte(s))

		return hex.EncodeToString(h[:])
	}

	for _, tc := range []struct {
		name    string
		order   *agentv1.Kexec
		wantErr string
	}{
		{
			name:  "digests match",
			order: &agentv1.Kexec{KernelUrl: srv.URL + "/kernel", KernelSha256: sum("KERNEL"), InitramfsUrl: srv.URL + "/initramfs", InitramfsSha256: sum("INITRAMFS")},
		},
		{
			name:  "no digests: not checked",
			order: &agentv1.Kexec{KernelUrl: srv.URL + "/kernel", InitramfsUrl: srv.URL + "/initramfs"},
		},
		{
			name:    "kernel does not match",
			order:   &agentv1.Kexec{KernelUrl: srv.URL + "/kernel", KernelSha256: sum("OTHER"), InitramfsUrl: srv.URL + "/initramfs"},
			wantErr: "error downloading the kernel: its SHA-256 is " + sum("KERNEL") + ", not " + sum("OTHER"),
		},
		{
			name:    "initramfs does not match",
			order:   &agentv1.Kexec{KernelUrl: srv.URL + "/kernel", InitramfsUrl: srv.URL + "/initramfs", InitramfsSha256: sum("x")},
			wantErr: "error downloading the initramfs: its SHA-256 is",
		},
		{
			name:    "missing",
			order:   &agentv1.Kexec{KernelUrl: srv.URL + "/nope", InitramfsUrl: srv.URL + "/initramfs"},
			wantErr: "error downloading the kernel: 404 Not Found",
		},
		{
			name:    "bad URL",
			order:   &agentv1.Kexec{KernelUrl: "::", InitramfsUrl: srv.URL + "/initramfs"},
			wantErr: "invalid kernel URL",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			a := &machineActions{logger: zaptest.NewLogger(t), dryRun: true, tmpDir: t.TempDir()}

			err := a.LoadKexec(t.Context(), tc.order)
			if tc.wantErr == "" {
				require.NoError(t, err)

				return
			}

			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}
