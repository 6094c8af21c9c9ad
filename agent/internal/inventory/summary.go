package inventory

import (
	"slices"
	"strings"
)

// Summary is what a person (anvilctl) and label rules need from an inventory.
type Summary struct {
	Vendor      string        `json:"vendor,omitempty"`
	Product     string        `json:"product,omitempty"`
	Serial      string        `json:"serial,omitempty"`
	UUID        string        `json:"uuid,omitempty"`
	CPUs        int           `json:"cpus"` // populated sockets
	CPUModel    string        `json:"cpu_model,omitempty"`
	Cores       int           `json:"cores"`
	Threads     int           `json:"threads"`
	MemoryBytes uint64        `json:"memory_bytes"`
	Disks       []DiskSummary `json:"disks,omitempty"`
	NICs        []NICSummary  `json:"nics,omitempty"`
}

// DiskSummary is one disk in a Summary.
type DiskSummary struct {
	Name      string `json:"name"`
	Size      uint64 `json:"size"`
	Model     string `json:"model,omitempty"`
	Serial    string `json:"serial,omitempty"`
	Transport string `json:"transport,omitempty"`
	CDROM     bool   `json:"cdrom,omitempty"`
}

// NICSummary is one physical network interface in a Summary.
type NICSummary struct {
	Name      string   `json:"name"`
	MAC       string   `json:"mac"`
	Driver    string   `json:"driver,omitempty"`
	Product   string   `json:"product,omitempty"`
	Up        bool     `json:"up"`
	Addresses []string `json:"addresses,omitempty"`
}

// Summarize condenses an inventory.
func (inv *Inventory) Summarize() Summary {
	var s Summary

	if inv.System != nil {
		spec := inv.System.TypedSpec()
		s.Vendor, s.Product, s.Serial, s.UUID = spec.Manufacturer, spec.ProductName, spec.SerialNumber, spec.UUID
	}

	for _, p := range inv.Processors {
		spec := p.TypedSpec()
		if spec.Socket == "" && spec.CoreCount == 0 {
			continue // empty socket
		}

		s.CPUs++
		s.Cores += int(spec.CoreCount)
		s.Threads += int(spec.ThreadCount)

		if s.CPUModel == "" {
			s.CPUModel = spec.ProductName
		}
	}

	for _, m := range inv.MemoryModules {
		s.MemoryBytes += uint64(m.TypedSpec().Size) << 20
	}

	for _, d := range inv.Disks {
		spec := d.TypedSpec()
		s.Disks = append(s.Disks, DiskSummary{
			Name: d.Metadata().ID(), Size: spec.Size, Model: spec.Model, Serial: spec.Serial,
			Transport: spec.Transport, CDROM: spec.CDROM,
		})
	}

	for _, l := range inv.Links {
		spec := l.TypedSpec()
		if !spec.Physical() {
			continue
		}

		nic := NICSummary{
			Name: l.Metadata().ID(), MAC: spec.HardwareAddr.String(), Driver: spec.Driver,
			Product: spec.Product, Up: spec.LinkState,
		}

		for _, a := range inv.Addresses {
			if a.TypedSpec().LinkName == nic.Name {
				nic.Addresses = append(nic.Addresses, a.TypedSpec().Address.String())
			}
		}

		slices.Sort(nic.Addresses)
		s.NICs = append(s.NICs, nic)
	}

	slices.SortFunc(s.NICs, func(a, b NICSummary) int { return strings.Compare(a.Name, b.Name) })

	return s
}
