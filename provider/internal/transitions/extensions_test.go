package transitions_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// TestDetectedExtensions: an allocation gets the extensions its hardware calls for
// beside the requested ones, unless the request or the provider says not to; a requested
// extension always stays.
func TestDetectedExtensions(t *testing.T) {
	t.Parallel()

	const (
		ucode = "siderolabs/intel-ucode"
		bnx2  = "siderolabs/bnx2-bnx2x"
		iscsi = "siderolabs/iscsi-tools"
	)

	for _, tc := range []struct {
		name     string
		provider bool
		req      transitions.AllocationRequest
		noInv    bool
		want     []string
		detected []string
	}{
		{name: "detected and requested", provider: true, req: transitions.AllocationRequest{Extensions: []string{iscsi}}, want: []string{bnx2, ucode, iscsi}, detected: []string{bnx2, ucode}},
		{name: "provider off", req: transitions.AllocationRequest{Extensions: []string{iscsi}}, want: []string{iscsi}},
		{name: "request opts out", provider: true, req: transitions.AllocationRequest{NoDetectedExtensions: true}, want: nil},
		{name: "one excluded", provider: true, req: transitions.AllocationRequest{ExcludeExtensions: []string{bnx2}}, want: []string{ucode}, detected: []string{ucode}},
		{name: "excluded but requested stays", provider: true, req: transitions.AllocationRequest{Extensions: []string{ucode}, ExcludeExtensions: []string{ucode}}, want: []string{bnx2, ucode}, detected: []string{bnx2}},
		{name: "no inventory", provider: true, noInv: true, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			ctx := t.Context()
			st := openState(t)
			tr := transitions.New(st, transitions.Options{Recorder: &fakeRecorder{}, DetectedExtensions: tc.provider})

			if !tc.noInv {
				// A Dell with an Intel Xeon and a Broadcom NetXtreme II 57810 (bnx2x).
				inv := resources.NewMachineInventory(machineID)
				inv.TypedSpec().CPUs = []resources.CPUInventory{{Manufacturer: "Intel(R) Corporation", Model: "Intel(R) Xeon(R) Gold 6230"}}
				inv.TypedSpec().PCIDevices = []resources.PCIInventory{{VendorID: "0x14e4", ProductID: "0x168e", ClassID: "0x02", SubclassID: "0x00", Driver: "bnx2x"}}
				require.NoError(t, st.Create(ctx, inv))
			}

			_, err := tr.Accept(ctx, machineID, true)
			require.NoError(t, err)

			req := tc.req
			req.TalosVersion = "v1.12.0"

			spec, err := tr.Allocate(ctx, machineID, req)
			require.NoError(t, err)

			assert.ElementsMatch(t, tc.want, spec.Allocation.Extensions)
			assert.Equal(t, tc.detected, spec.Allocation.DetectedExtensions)
		})
	}

	_, err := transitions.New(openState(t), transitions.Options{}).Allocate(t.Context(), machineID, transitions.AllocationRequest{
		TalosVersion: "v1.12.0", ExcludeExtensions: []string{"not an extension!"},
	})
	assert.Equal(t, transitions.CodeInvalid, codeOf(err), "a malformed exclusion is refused: %v", err)
}
