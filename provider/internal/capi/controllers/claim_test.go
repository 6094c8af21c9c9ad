package controllers_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/anvil-metal/anvil/api/infrastructure/v1beta1"
	"github.com/anvil-metal/anvil/provider/internal/capi/controllers"
)

func server(name string, state infrav1.ServerState, lbls map[string]string, mutate ...func(*infrav1.Server)) infrav1.Server {
	s := infrav1.Server{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}, Status: infrav1.ServerStatus{UUID: name, State: state}}
	for _, m := range mutate {
		m(&s)
	}

	return s
}

func TestCandidates(t *testing.T) {
	t.Parallel()

	rack := map[string]string{"rack": "r1"}
	servers := []infrav1.Server{
		server("ready-1", infrav1.ServerAvailable, rack),
		server("wiping", infrav1.ServerPreparing, rack),
		server("ready-2", infrav1.ServerAvailable, rack),
		server("other-rack", infrav1.ServerAvailable, map[string]string{"rack": "r2"}),
		server("allocated", infrav1.ServerAllocated, rack, func(s *infrav1.Server) {
			s.Status.Allocation = &infrav1.ServerAllocation{ID: "a", Owner: "capi/x"}
		}),
		server("installed", infrav1.ServerInstalled, rack, func(s *infrav1.Server) {
			s.Status.Allocation = &infrav1.ServerAllocation{ID: "b"}
		}),
		server("cordoned", infrav1.ServerAvailable, rack, func(s *infrav1.Server) { s.Status.Cordoned = true }),
		server("no-state", "", rack),
	}

	for _, tc := range []struct {
		name string
		sel  labels.Selector
		want []string // as a set, in rank groups
		last string
	}{
		{"every free server, the wiping one last", labels.Everything(), []string{"ready-1", "ready-2", "other-rack", "wiping"}, "wiping"},
		{"the selector's", labels.SelectorFromSet(rack), []string{"ready-1", "ready-2", "wiping"}, "wiping"},
		{"none", labels.SelectorFromSet(map[string]string{"rack": "r9"}), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got := controllers.Candidates("capi/default/m/1", tc.sel, servers)
			assert.ElementsMatch(t, tc.want, got)

			if tc.last != "" {
				assert.Equal(t, tc.last, got[len(got)-1])
			}

			assert.Equal(t, got, controllers.Candidates("capi/default/m/1", tc.sel, servers), "the same owner, the same order")
		})
	}

	// Owners that claim at once mostly try different servers first.
	firsts := map[string]bool{}
	for i := range 16 {
		firsts[controllers.Candidates(string(rune('a'+i)), labels.Everything(), servers)[0]] = true
	}

	assert.Greater(t, len(firsts), 1, "every owner tries the same server first")
}

func TestOwnerOf(t *testing.T) {
	t.Parallel()

	mm := &infrav1.MetalMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", UID: types.UID("1234")}}
	assert.Equal(t, "capi/ns/m", controllers.OwnerOf(mm), "no UID: a moved MetalMachine finds its claim")
}
