package lab

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/machine"
)

// BMCPasswordFile holds the lab administrator's password on its simulated BMCs (mode
// 0600), for a user who gives a BMC to the provider: the password is handed over by
// file, never shown.
func (s *State) BMCPasswordFile() string { return filepath.Join(s.Dir, "bmc-password") }

// OmniBMCConfigFile is machine m's BMC as an Omni InfraMachineBMCConfig, for a user to
// apply (mode 0600: an IPMI one holds the password).
func OmniBMCConfigFile(m *machine.Machine) string {
	return filepath.Join(m.Dir, "omni-bmc-config.yaml")
}

// WriteGiveBMC tells how to give machine m's BMC to the provider as a user gives a real
// one: the exact anvilctl command and, with the lab's Omni, an InfraMachineBMCConfig
// to apply (written to OmniBMCConfigFile). The password is never written to w: an IPMI
// BMC's is in BMCPasswordFile, which this writes.
func (s *State) WriteGiveBMC(w io.Writer, m *machine.Machine) error {
	bmc := s.BMC(m.Name)

	var b strings.Builder

	anvilctl := fmt.Sprintf("_out/bin/anvilctl --endpoint unix://%s machine bmc set %s", s.ControlSocket(), m.UUID)

	var omniSpec string

	switch bmc.Owner {
	case OwnerAPI:
		fmt.Fprintf(&b, "machine %s (uuid %s): its BMC is the lab's power API, http://%s\n", m.Name, m.UUID, PowerAPIListen)
		fmt.Fprintf(&b, "  to the provider:\n    %s --kind api --address http://%s\n", anvilctl, PowerAPIListen)

		omniSpec = fmt.Sprintf("{api: {address: 'http://%s'}}", PowerAPIListen)
	case OwnerIPMI:
		if err := os.WriteFile(s.BMCPasswordFile(), []byte(s.BMCPassword+"\n"), 0o600); err != nil {
			return fmt.Errorf("error writing the BMC password file: %w", err)
		}

		fmt.Fprintf(&b, "machine %s (uuid %s): its BMC is a simulated IPMI BMC, address %s port %d (lanplus), user %s, password in %s\n",
			m.Name, m.UUID, labnet.ProviderAddr, bmc.LANPort, LabBMCUser, s.BMCPasswordFile())
		fmt.Fprintf(&b, "  to the provider:\n    %s --kind ipmi --address %s --port %d --username %s --password-file %s\n",
			anvilctl, labnet.ProviderAddr, bmc.LANPort, LabBMCUser, s.BMCPasswordFile())
		fmt.Fprintf(&b, "  (or without --username and --password-file: the provider then has the agent provision a user of its own, in-band, once the machine is accepted)\n")

		omniSpec = fmt.Sprintf("{ipmi: {address: %s, port: %d, username: %s, password: '%s'}}", labnet.ProviderAddr, bmc.LANPort, LabBMCUser, s.BMCPassword)
	default:
		fmt.Fprintf(&b, "machine %s (uuid %s) has no BMC: the lab powers it (lab machine start|stop|reset), the provider's power is manual\n", m.Name, m.UUID)

		_, err := io.WriteString(w, b.String())

		return err
	}

	if bmc.Registered {
		fmt.Fprintf(&b, "  (the lab gave it to the provider already: anvilctl get bmc %s)\n", m.UUID)
	}

	if s.Omni != nil {
		doc := fmt.Sprintf("metadata: {namespace: default, type: InfraMachineBMCConfigs.omni.sidero.dev, id: %s}\nspec: %s\n", m.UUID, omniSpec)

		if err := os.MkdirAll(m.Dir, 0o755); err != nil {
			return fmt.Errorf("error creating %s: %w", m.Dir, err)
		}

		if err := os.WriteFile(OmniBMCConfigFile(m), []byte(doc), 0o600); err != nil {
			return fmt.Errorf("error writing %s: %w", OmniBMCConfigFile(m), err)
		}

		fmt.Fprintf(&b, "  through Omni (an InfraMachineBMCConfig, in %s):\n    go run ./hack/cmd/lab --dir %s omnictl -- apply -f %s\n",
			OmniBMCConfigFile(m), s.Dir, OmniBMCConfigFile(m))
	}

	_, err := io.WriteString(w, b.String())

	return err
}
