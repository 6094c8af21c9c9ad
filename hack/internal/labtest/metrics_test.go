package labtest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/hack/internal/labtest"
)

func TestMetricsSum(t *testing.T) {
	t.Parallel()

	m := labtest.Metrics(`# HELP anvil_pxe_dhcp_ignored_total DHCP packets not answered, by server and reason.
# TYPE anvil_pxe_dhcp_ignored_total counter
anvil_pxe_dhcp_ignored_total{reason="other",server="proxy"} 4
anvil_pxe_dhcp_ignored_total{reason="unready",server="bootserver"} 2
anvil_pxe_dhcp_ignored_total{reason="unready",server="proxy"} 3
anvil_replica_leader 1
anvil_replica_leader_x 7
`)

	assert.InDelta(t, 5, m.Sum("anvil_pxe_dhcp_ignored_total", "reason", "unready"), 0)
	assert.InDelta(t, 3, m.Sum("anvil_pxe_dhcp_ignored_total", "reason", "unready", "server", "proxy"), 0)
	assert.InDelta(t, 9, m.Sum("anvil_pxe_dhcp_ignored_total"), 0)
	assert.InDelta(t, 1, m.Sum("anvil_replica_leader"), 0)
	assert.InDelta(t, 0, m.Sum("anvil_replica_fenced_writes_total"), 0)
}
