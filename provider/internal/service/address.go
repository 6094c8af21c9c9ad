package service

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// advertiseAddress returns the address machines reach the provider at: the one given,
// or the host's single routable IPv4 address.
func advertiseAddress(given string) (netip.Addr, error) {
	if given != "" {
		addr, err := netip.ParseAddr(given)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("invalid --api-advertise-address: %w", err)
		}

		return addr, nil
	}

	prefixes, err := interfacePrefixes()
	if err != nil {
		return netip.Addr{}, err
	}

	var found []netip.Addr

	for _, p := range prefixes {
		if a := p.Addr(); a.Is4() && a.IsGlobalUnicast() {
			found = append(found, a)
		}
	}

	switch len(found) {
	case 0:
		return netip.Addr{}, errors.New("no routable IPv4 address found: set --api-advertise-address")
	case 1:
		return found[0], nil
	default:
		s := make([]string, len(found))
		for i, a := range found {
			s[i] = a.String()
		}

		return netip.Addr{}, fmt.Errorf("several routable addresses (%s): set --api-advertise-address", strings.Join(s, ", "))
	}
}

// subnetOf returns the prefix of the interface address addr.
func subnetOf(addr netip.Addr) (netip.Prefix, error) {
	prefixes, err := interfacePrefixes()
	if err != nil {
		return netip.Prefix{}, err
	}

	for _, p := range prefixes {
		if p.Addr() == addr {
			return p.Masked(), nil
		}
	}

	return netip.Prefix{}, fmt.Errorf("no interface has address %s", addr)
}

func interfacePrefixes() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("error listing interface addresses: %w", err)
	}

	var prefixes []netip.Prefix

	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}

		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}

		ones, _ := ipn.Mask.Size()
		prefixes = append(prefixes, netip.PrefixFrom(ip.Unmap(), ones))
	}

	return prefixes, nil
}
