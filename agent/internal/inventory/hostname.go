package inventory

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// HostnameController publishes the kernel's hostname and NIS domain name as
// the singleton network.HostnameStatus; DHCP may set them, so it polls.
type HostnameController struct {
	Hostname func() (string, error)
	ProcRoot string
	Interval time.Duration

	firstPass
}

// Name implements controller.Controller.
func (ctrl *HostnameController) Name() string { return "inventory.HostnameController" }

// Inputs implements controller.Controller.
func (ctrl *HostnameController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *HostnameController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.HostnameStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *HostnameController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	ticker := time.NewTicker(ctrl.Interval)
	defer ticker.Stop()

	pace := ctrl.pacer(ticker.C)

	for pace.next(ctx, r) {
		hostname, err := ctrl.Hostname()
		if err != nil {
			logger.Warn("error reading hostname", zap.Error(err))

			continue
		}

		// A hostname given as an FQDN is split as Talos splits it.
		hostname, domain, _ := strings.Cut(hostname, ".")
		if domain == "" {
			domain = readString(filepath.Join(ctrl.ProcRoot, "sys", "kernel", "domainname"))
		}

		if domain == "(none)" {
			domain = ""
		}

		r.StartTrackingOutputs()

		if err = safe.WriterModify(ctx, r, network.NewHostnameStatus(network.NamespaceName, network.HostnameID), func(res *network.HostnameStatus) error {
			*res.TypedSpec() = network.HostnameStatusSpec{Hostname: hostname, Domainname: domain}

			return nil
		}); err != nil {
			return fmt.Errorf("error updating hostname: %w", err)
		}

		if err = safe.CleanupOutputs[*network.HostnameStatus](ctx, r); err != nil {
			return fmt.Errorf("error cleaning up hostname: %w", err)
		}
	}

	return nil
}
