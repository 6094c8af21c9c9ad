package httpapi_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/provider/internal/machineview"
)

// TestBootWaitsForACurrentView: while the view may be stale (Current errs: a replica cut
// off from etcd), the boot requests — iPXE's boot script and the UKI — get 503 with the
// reason, which iPXE retries, and no observation is made; /readyz says so too, for
// keepalived or a load balancer to move away, while /healthz (liveness) stays ok. The
// start script holds no decision and is served either way. With Current nil all of it is
// served.
func TestBootWaitsForACurrentView(t *testing.T) {
	t.Parallel()

	errCutOff := errors.New("etcd not reached for 7s")

	for _, tc := range []struct {
		name    string
		current error
		// boot is the code of the boot requests and of /readyz.
		boot int
	}{
		{"current", nil, http.StatusOK},
		{"cut off", errCutOff, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			f := newFixture(t, func(v *machineview.View) { v.Current = func() error { return tc.current } })
			withARM64Assets(t, f)

			for _, target := range []string{bootURL(m1), ukiURL(m1), "/readyz"} {
				code, body := f.get(t, target)
				assert.Equal(t, tc.boot, code, target)

				if tc.current != nil {
					assert.Contains(t, body, "may be stale: "+errCutOff.Error(), "%s names the reason", target)
				}
			}

			if tc.current == nil {
				_, body := f.get(t, "/readyz")
				assert.Equal(t, "ok\n", body)
				assert.Len(t, f.obs, 2, "the boot script's and the UKI's observations")
			} else {
				assert.Empty(t, f.obs, "nothing observed from a stale view")
			}

			for _, target := range []string{"/healthz", "/ipxe/start.ipxe"} {
				code, _ := f.get(t, target)
				assert.Equal(t, http.StatusOK, code, target)
			}
		})
	}
}
