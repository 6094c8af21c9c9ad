// Package pxe holds Anvil's protocol-only boot services: a ProxyDHCP that answers PXE
// firmware and iPXE beside the site's DHCP server, an optional full DHCP server for
// networks without one, and a read-only TFTP server for the iPXE binaries.
//
// The decision "what to answer" is the pure function Answer (and ClientArch for the
// architecture mapping), so it is tested and fuzzed without sockets; the servers only
// move bytes and count.
package pxe
