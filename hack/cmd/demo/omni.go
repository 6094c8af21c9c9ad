package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/omnilab"
)

// omniDemo is the demo beside the lab's Omni: Omni decides, Anvil does.
type omniDemo struct {
	*demo

	omni *omnilab.Client
}

// omniGet decodes the spec of one of Omni's resources (omnictl get -o json).
func (d *omniDemo) omniGet(ctx context.Context, typ, ns, id string, spec any) error {
	out, err := d.omni.Run(ctx, "get", typ, id, "--namespace", ns, "-o", "json")
	if err != nil {
		return err
	}

	var r struct {
		Spec json.RawMessage `json:"spec"`
	}

	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return fmt.Errorf("decoding %s %s: %w", typ, id, err)
	}

	return json.Unmarshal(r.Spec, spec)
}

// omniApply applies a resource document as the lab's Omni admin.
func (d *omniDemo) omniApply(ctx context.Context, name, doc string) error {
	path := filepath.Join(d.state.Dir, name)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		return err
	}

	if out, err := d.omni.Run(ctx, "apply", "-f", path); err != nil {
		return fmt.Errorf("omnictl apply -f %s: %w: %s", path, err, out)
	}

	return nil
}

// wait polls cond every 2 s for up to 10 minutes; an error from cond is a "not yet".
func (d *omniDemo) wait(ctx context.Context, what string, cond func() error) error {
	deadline := time.Now().Add(10 * time.Minute)

	for {
		err := cond()
		if err == nil {
			return nil
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s: %w", what, err)
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// infraStatus is the part of infra.MachineStatus the demo shows.
type infraStatus struct {
	Power      int  `json:"powerstate"`
	ReadyToUse bool `json:"readytouse"`
	Installed  bool `json:"installed"`
}

// runOmni brings the lab up beside a real Omni with two machines, and tells the story
// of the first from pending to a cluster's running Talos.
func runOmni(ctx context.Context, dir, prefix string) error {
	base := &demo{start: time.Now(), anvilctl: "_out/bin/anvilctl"}

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Machines: 2,
		Firmware:    []machine.Firmware{machine.BIOS, machine.UEFI},
		ProviderBin: "_out/bin/provider", AgentAssetsDir: "_out/agent",
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		APIPort:    50042,
		FactoryBin: "_out/bin/lab-factory", FactoryAssetsDir: "_out/talos-standin",
		BMC: []lab.PowerOwner{lab.OwnerAPI}, PowerBin: "_out/bin/lab-power",
		OmniBin: "_out/bin/omni", OmnictlBin: "_out/bin/omnictl",
	}

	if err := prepare(ctx, base, cfg, dir, prefix); err != nil {
		return err
	}

	base.say("bringing the lab up in %s beside a real Omni (%s): the provider is its infra provider %q", dir, cfg.OmniBin, lab.ProviderID)

	var err error
	if base.state, err = lab.Up(ctx, cfg); err != nil {
		return fmt.Errorf("%w (go run ./hack/cmd/lab down removes what was started)", err)
	}

	d := &omniDemo{demo: base}
	if d.omni, err = d.state.OmniClient(cfg.OmnictlBin); err != nil {
		return err
	}

	ms := d.state.MachineList()

	for _, m := range ms {
		d.say("%s powered on: %s firmware; it PXE-boots the agent with Omni's join arguments", m.Name, m.Firmware)
	}

	for _, m := range ms {
		if err := d.wait(ctx, m.Name+" in Omni", func() error {
			var im struct {
				Acceptance int `json:"acceptancestatus"`
			}

			return d.omniGet(ctx, "InfraMachines.omni.sidero.dev", "infra-provider", m.UUID, &im)
		}); err != nil {
			return err
		}

		d.say("%s is in Omni, pending acceptance: the provider touches nothing of it", m.Name)
	}

	for _, m := range ms {
		doc := fmt.Sprintf("metadata: {namespace: default, type: InfraMachineConfigs.omni.sidero.dev, id: %s}\nspec: {acceptancestatus: 1}\n", m.UUID)
		if err := d.omniApply(ctx, "accept-"+m.Name+".yaml", doc); err != nil {
			return err
		}

		d.say("%s accepted in Omni (omnictl apply -f %s): Anvil wipes it and powers it off, as Omni prefers", m.Name, filepath.Join(dir, "accept-"+m.Name+".yaml"))
	}

	for _, m := range ms {
		if err := d.wait(ctx, m.Name+" ready to use", func() error {
			var s infraStatus
			if err := d.omniGet(ctx, "InfraMachineStatuses.omni.sidero.dev", "infra-provider", m.UUID, &s); err != nil {
				return err
			}

			if !s.ReadyToUse || s.Power != 1 {
				return errors.New("not yet")
			}

			return nil
		}); err != nil {
			return err
		}

		d.say("%s wiped, ready to use in Omni, powered off", m.Name)
	}

	target := ms[0]
	template := filepath.Join(dir, "cluster.yaml")

	if err := os.WriteFile(template, []byte(fmt.Sprintf(
		"kind: Cluster\nname: demo\nkubernetes:\n  version: v1.32.0\ntalos:\n  version: v1.9.0\n---\nkind: ControlPlane\nmachines:\n  - %s\n", target.UUID)), 0o600); err != nil {
		return err
	}

	if out, err := d.omni.Run(ctx, "cluster", "template", "sync", "-f", template); err != nil {
		return fmt.Errorf("omnictl cluster template sync: %w: %s", err, out)
	}

	created := time.Now()

	d.say("cluster demo created in Omni with %s (omnictl cluster template sync -f %s): Anvil powers it on into the factory's Talos", target.Name, template)

	follow := newFollower(target.SerialLog())

	err = d.wait(ctx, target.Name+" installed and running", func() error {
		for _, line := range follow.lines("TALOS-STANDIN") {
			if len(line) > 160 {
				line = line[:160] + "…"
			}

			d.say("%s console: %s", target.Name, line)
		}

		var s infraStatus
		if err := d.omniGet(ctx, "InfraMachineStatuses.omni.sidero.dev", "infra-provider", target.UUID, &s); err != nil {
			return err
		}

		b, _ := os.ReadFile(target.SerialLog())
		if !s.Installed || !strings.Contains(string(b), "TALOS-STANDIN omni stage=running") {
			return errors.New("not yet")
		}

		return nil
	})
	if err != nil {
		return err
	}

	d.say("%s installed and running from its disk, %s after the cluster was created", target.Name, time.Since(created).Round(time.Second))

	sock := d.state.ControlSocket()
	fmt.Printf(`
The lab and its Omni keep running. Look around:
  L="go run ./hack/cmd/lab omnictl --"
  $L get inframachines -n infra-provider                 # Omni's decisions: acceptance, cluster, wipe id, install events
  $L get inframachinestatuses -n infra-provider          # Anvil's reports: power, ready to use, installed
  $L get machinestatus %s -o yaml                         # labels omni.sidero.dev/infra-provider/%s/anvil.dev/...
  $L get clustermachinestatus %s -o yaml
  _out/bin/anvilctl --endpoint unix://%s get machines    # Anvil's view, with Omni's (OMNI column)
Then let Omni take it back: Omni resets it over Talos' API, Anvil wipes it and it is ready again:
  $L cluster delete demo
  less -R %s
Tear it down:
  go run ./hack/cmd/lab down
`, target.UUID, lab.ProviderID, target.UUID, sock, target.SerialLog())

	return nil
}

// prepare builds what the lab runs and takes a previous lab down: each run starts afresh.
func prepare(ctx context.Context, d *demo, cfg lab.Config, dir, prefix string) error {
	d.say("building the Image Factory stand-in, the lab's power API and the stand-in Talos (hack/cmd/lab-factory, hack/cmd/lab-power, hack/cmd/talos-standin)")

	if err := lab.BuildFactory(ctx, ".", cfg.FactoryBin); err != nil {
		return err
	}

	if err := lab.BuildPower(ctx, ".", cfg.PowerBin); err != nil {
		return err
	}

	if err := lab.BuildStandinAssets(ctx, ".", cfg.FactoryAssetsDir); err != nil {
		return err
	}

	if _, err := os.Stat(dir); err == nil {
		d.say("a previous lab is in %s: taking it down and starting afresh", dir)

		if err := lab.Down(ctx, dir, prefix); err != nil {
			return fmt.Errorf("error taking the previous lab down: %w", err)
		}

		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("error removing the previous lab: %w", err)
		}
	}

	return nil
}
