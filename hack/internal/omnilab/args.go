package omnilab

import (
	"net"
	"path/filepath"
	"strconv"
)

// Where Omni listens and what it advertises: everything machines reach on its lab
// address; what only Omni itself uses on its loopback, which is its namespace's own.
const (
	// APIPort serves Omni's API (gRPC and HTTP, TLS) and omnictl's endpoint.
	APIPort = 8099
	// MachineAPIPort serves SideroLink's provisioning API (gRPC, plaintext) that machines
	// join with: the siderolink.api= kernel argument.
	MachineAPIPort = 8090
	// WireGuardPort is SideroLink's WireGuard endpoint (UDP).
	WireGuardPort = 50180
	// EventSinkPort and LogServerPort are reached over SideroLink, on SideroLinkAddr: the
	// machines' events (gRPC) and kernel logs (JSON lines over TCP). Omni's default
	// event sink port is 8090; 8091 keeps it apart from the machine API's port.
	EventSinkPort = 8091
	LogServerPort = 8092

	// SideroLinkAddr is Omni's own address in the SideroLink network (on its TUN,
	// "siderolink"): the address of the event sink and the log server.
	SideroLinkAddr = "fdae:41e4:649b:9303::1"

	etcdClientURL   = "http://127.0.0.1:22379"
	k8sProxyListen  = "127.0.0.1:8095"
	metricsListen   = "127.0.0.1:2122"
	serviceAccounts = "24h"
)

// Files in Omni's directory.
const (
	caFile       = "ca.crt"
	certFile     = "tls.crt"
	keyFile      = "tls.key"
	stateKeyFile = "state-key.asc"
	adminKeyFile = "admin.key"
	etcdDir      = "etcd"
	sqliteFile   = "sqlite.db"
	// omnictlDir is the directory of omnictl downloads Omni serves, relative to its working
	// directory: it refuses to start without one.
	omnictlDir = "omnictl"
	// omniconfigFile is omnictl's configuration, which omnictl writes when it is missing:
	// given with --omniconfig so it never lands in $HOME.
	omniconfigFile = "omniconfig"
)

// Args is Omni's command line for a lab Omni at addr whose directory is dir, with the
// Image Factory at factoryURL (http://host:port) and the container registry at
// registry (host:port): Kubernetes versions are the tags of its siderolabs/kubelet.
func Args(addr, dir, factoryURL, registry string) []string {
	hostPort := func(port int) string { return net.JoinHostPort(addr, strconv.Itoa(port)) }
	file := func(name string) string { return filepath.Join(dir, name) }

	return []string{
		// No EULA prompt, no account: a lab user.
		"--eula-accept-name=Anvil Lab",
		"--eula-accept-email=lab@anvil.invalid",

		"--bind-addr=" + hostPort(APIPort),
		"--advertised-api-url=https://" + hostPort(APIPort) + "/",
		"--cert=" + file(certFile),
		"--key=" + file(keyFile),

		"--machine-api-bind-addr=" + hostPort(MachineAPIPort),
		"--machine-api-advertised-url=grpc://" + hostPort(MachineAPIPort),
		"--siderolink-wireguard-bind-addr=" + hostPort(WireGuardPort),
		"--siderolink-wireguard-advertised-addr=" + hostPort(WireGuardPort),
		"--event-sink-port=" + strconv.Itoa(EventSinkPort),
		"--log-server-port=" + strconv.Itoa(LogServerPort),

		"--k8s-proxy-bind-addr=" + k8sProxyListen,
		"--metrics-bind-addr=" + metricsListen,
		"--workload-proxying-enabled=false",
		"--embedded-discovery-service-enabled=true", // workers find their control plane's trustd through it (a cluster feature)

		// Omni refuses to run without an authentication provider. Auth0's is switched on
		// with a domain that does not resolve and is never contacted: every call of the
		// lab is made with service accounts, whose keys are PGP-signed, not with Auth0.
		"--auth-auth0-enabled=true",
		"--auth-auth0-client-id=anvil-lab",
		"--auth-auth0-domain=auth0.invalid",
		"--create-initial-service-account",
		"--initial-service-account-key-path=" + file(adminKeyFile),
		"--initial-service-account-lifetime=" + serviceAccounts,

		"--private-key-source=file://" + file(stateKeyFile),
		"--etcd-embedded-db-path=" + file(etcdDir) + "/",
		"--etcd-embedded-unsafe-fsync=true", // the lab's state is thrown away with it
		"--etcd-endpoints=" + etcdClientURL,
		"--sqlite-storage-path=" + file(sqliteFile),

		// Talos and Kubernetes versions, and schematics, from the lab's stand-in.
		"--kubernetes-registry=" + registry + "/siderolabs/kubelet",
		"--talos-installer-registry=" + registry + "/siderolabs/installer",
		"--image-factory-address=" + factoryURL,
		"--image-factory-pxe-address=" + factoryURL,
	}
}
