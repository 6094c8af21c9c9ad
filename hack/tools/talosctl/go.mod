module github.com/anvil-metal/anvil/hack/tools/talosctl

go 1.26.5

tool github.com/siderolabs/talos/cmd/talosctl

require (
	github.com/siderolabs/talos v1.13.9
	github.com/siderolabs/talos/pkg/machinery v1.13.9
	// v3.6.12 (Talos' pin) is refused by the module proxy.
	go.etcd.io/etcd/etcdutl/v3 v3.6.14
)

// Talos' own replaces, except its containerd fork (refused by the proxy; upstream
// containerd/v2 builds talosctl) and go-kubernetes pinned to a served version.
replace (
	github.com/coredns/coredns => github.com/siderolabs/coredns v1.14.53
	github.com/mdlayher/ethtool => github.com/siderolabs/ethtool v0.4.0-sidero
	github.com/mdlayher/kobject => github.com/smira/kobject v0.0.0-20240304111826-49c8d4613389
	golang.zx2c4.com/wireguard/wgctrl => github.com/siderolabs/wgctrl-go v0.0.0-20251029173431-c4fd5f6a4e72
	// v0.2.37–38 (Talos' pin) are refused by the module proxy.
	github.com/siderolabs/go-kubernetes => github.com/siderolabs/go-kubernetes v0.2.36
)
