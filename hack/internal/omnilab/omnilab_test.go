package omnilab

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/cosi-project/runtime/pkg/keystorage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/labpki"
)

// TestArgs: Omni serves machines on its lab address, keeps its own services on its
// loopback, keeps every file in its directory and asks only the lab for versions.
func TestArgs(t *testing.T) {
	t.Parallel()

	args := Args("10.77.0.3", "/lab/omni", "http://10.77.0.1:8080", "10.77.0.1:8080")

	for _, want := range []string{
		"--bind-addr=10.77.0.3:8099",
		"--advertised-api-url=https://10.77.0.3:8099/",
		"--machine-api-bind-addr=10.77.0.3:8090",
		"--machine-api-advertised-url=grpc://10.77.0.3:8090",
		"--siderolink-wireguard-bind-addr=10.77.0.3:50180",
		"--siderolink-wireguard-advertised-addr=10.77.0.3:50180",
		"--event-sink-port=8091",
		"--log-server-port=8092",
		"--cert=/lab/omni/tls.crt",
		"--key=/lab/omni/tls.key",
		"--private-key-source=file:///lab/omni/state-key.asc",
		"--create-initial-service-account",
		"--initial-service-account-key-path=/lab/omni/admin.key",
		"--etcd-embedded-db-path=/lab/omni/etcd/",
		"--sqlite-storage-path=/lab/omni/sqlite.db",
		"--auth-auth0-enabled=true",
		"--kubernetes-registry=10.77.0.1:8080/siderolabs/kubelet",
		"--talos-installer-registry=10.77.0.1:8080/siderolabs/installer",
		"--image-factory-address=http://10.77.0.1:8080",
		"--image-factory-pxe-address=http://10.77.0.1:8080",
		"--workload-proxying-enabled=false",
		// Real Talos workers find a control plane's trustd through discovery.
		"--embedded-discovery-service-enabled=true",
	} {
		assert.Contains(t, args, want)
	}

	assert.Contains(t, strings.Join(args, " "), "--eula-accept-name=", "no EULA prompt")

	for _, a := range args {
		name, value, _ := strings.Cut(a, "=")
		assert.NotContains(t, value, "0.0.0.0", "%s listens on every address", name)

		if strings.HasSuffix(name, "-bind-addr") && !strings.HasPrefix(value, "10.77.0.3:") {
			assert.True(t, strings.HasPrefix(value, "127.0.0.1:"), "%s is neither the lab address nor the loopback", a)
		}

		if strings.HasPrefix(value, "/") || strings.HasPrefix(value, "file:///") {
			assert.Contains(t, value, "/lab/omni/", "%s is outside Omni's directory", a)
		}
	}

	seen := map[string]bool{}
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		assert.False(t, seen[name], "%s given twice", name)
		seen[name] = true
	}
}

// TestNewStateKey: the state key is what Omni takes: armored, a certify-only ed25519
// primary key with an identity (Omni names its key slot after it) and a cv25519
// encryption subkey; Omni's key storage (cosi-project/runtime keystorage) seals its
// master key with the public key and opens it with the secret one.
func TestNewStateKey(t *testing.T) {
	t.Parallel()

	armored, err := NewStateKey("Anvil lab Omni", "omni@anvil.invalid")
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(armored, []byte("-----BEGIN PGP PRIVATE KEY BLOCK-----")))

	ring, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(armored))
	require.NoError(t, err)
	require.Len(t, ring, 1)

	e := ring[0]
	require.NotNil(t, e.PrivateKey)
	assert.Equal(t, packet.PubKeyAlgoEdDSA, e.PrimaryKey.PubKeyAlgo)

	require.Len(t, e.Identities, 1)

	for name, id := range e.Identities {
		assert.Equal(t, "Anvil lab Omni (Anvil lab Omni state) <omni@anvil.invalid>", name)
		assert.True(t, id.SelfSignature.FlagCertify)
		assert.False(t, id.SelfSignature.FlagSign, "the primary key only certifies")
	}

	require.Len(t, e.Subkeys, 1)

	sub := e.Subkeys[0]
	assert.Equal(t, packet.PubKeyAlgoECDH, sub.PublicKey.PubKeyAlgo)
	assert.True(t, sub.Sig.FlagEncryptCommunications && sub.Sig.FlagEncryptStorage)

	curve, err := sub.PublicKey.Curve()
	require.NoError(t, err)
	assert.Equal(t, packet.Curve25519, curve)

	var pub bytes.Buffer

	w, err := armor.Encode(&pub, openpgp.PublicKeyType, nil)
	require.NoError(t, err)
	require.NoError(t, e.Serialize(w))
	require.NoError(t, w.Close())

	var ks keystorage.KeyStorage
	require.NoError(t, ks.InitializeRnd(rand.Reader, "slot", pub.String()))

	master, err := ks.GetMasterKey("slot", string(armored))
	require.NoError(t, err)
	assert.Len(t, master, 32)
}

// TestPrepare: Omni's directory gets the omnictl/ directory, a certificate for the lab
// address from a CA whose file is kept, and a state key, each its owner's only where
// secret; a second run keeps them.
func TestPrepare(t *testing.T) {
	t.Parallel()

	dir := filepath.Join(t.TempDir(), "omni")
	require.NoError(t, prepare(dir))

	st, err := os.Stat(filepath.Join(dir, omnictlDir))
	require.NoError(t, err)
	assert.True(t, st.IsDir())

	for _, secret := range []string{keyFile, stateKeyFile} {
		st, err := os.Stat(filepath.Join(dir, secret))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), secret)
	}

	o := &Omni{Dir: dir}

	pool, err := labpki.Pool(o.CAFile())
	require.NoError(t, err)

	b, err := os.ReadFile(filepath.Join(dir, certFile))
	require.NoError(t, err)

	block, _ := pem.Decode(b)
	require.NotNil(t, block)

	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)

	_, err = cert.Verify(x509.VerifyOptions{DNSName: Addr, Roots: pool})
	require.NoError(t, err, "the certificate is the lab address's, from the CA in CAFile")

	before := readAll(t, dir, caFile, certFile, keyFile, stateKeyFile)

	require.NoError(t, prepare(dir))
	assert.Equal(t, before, readAll(t, dir, caFile, certFile, keyFile, stateKeyFile), "a second run keeps the secrets")
}

func TestEndpoints(t *testing.T) {
	t.Parallel()

	o := &Omni{Dir: "/lab/omni"}
	assert.Equal(t, "https://10.77.0.3:8099", o.Endpoint())
	assert.Equal(t, "grpc://10.77.0.3:8090", o.MachineAPIURL())
	assert.Equal(t, "/lab/omni/ca.crt", o.CAFile())
	assert.Equal(t, "/lab/omni/admin.key", o.AdminKeyFile())
	assert.False(t, o.Running())
	assert.False(t, (*Omni)(nil).Running())
	require.NoError(t, (*Omni)(nil).Stop(t.Context()))
}

func readAll(t *testing.T, dir string, names ...string) map[string]string {
	t.Helper()

	m := map[string]string{}

	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		require.NoError(t, err)

		m[n] = string(b)
	}

	return m
}

// What omnictl v1.9.3 printed against the lab's Omni.
const (
	infraProviderCreateOut = `Your infra provider "anvil" is ready to use
Created infra provider service account "infra-provider:anvil" with public key ID "6d109a50976d45992237397c8e0a0deced9e29a1"

Set the following environment variables to use the service account:
OMNI_ENDPOINT=https://10.77.0.3:8099
OMNI_SERVICE_ACCOUNT_KEY=eyJuYW1lIjoiaW5mcmEtcHJvdmlkZXI6YW52aWwifQ==

Note: Store the service account key securely, it will not be displayed again
Please use the endpoint and the service account key to set up the infra provider
`

	providerJoinConfigOut = `metadata:
    namespace: infra-provider
    type: ProviderJoinConfigs.omni.sidero.dev
    id: anvil-lab-test
    version: 1
    owner: ProviderJoinConfigController
    phase: running
    labels:
        omni.sidero.dev/infra-provider-id: anvil-lab-test
spec:
    config:
        kernelargs:
            - siderolink.api=grpc://10.77.0.3:8090?jointoken=v2%3AeyJleHRyYV9kYXRhIjp7Im9tbmkuc2lkZXJvLmRldi9pbmZyYS1wcm92aWRlci1pZCI6ImFudmlsLWxhYi10ZXN0In0sInNpZ25hdHVyZSI6Ik5XSEpmMVBNUlhNM1JId0w2UE5TV2poa3ptOXpSSkh6eW93L3JJOVo4elk9In0%3D
            - talos.events.sink=[fdae:41e4:649b:9303::1]:8091
            - talos.logging.kernel=tcp://[fdae:41e4:649b:9303::1]:8092
        config: |
            apiVersion: v1alpha1
            kind: SideroLinkConfig
            apiUrl: grpc://10.77.0.3:8090?jointoken=v2%3AeyJleHRyYV9kYXRhIjp7Im9tbmkuc2lkZXJvLmRldi9pbmZyYS1wcm92aWRlci1pZCI6ImFudmlsLWxhYi10ZXN0In0sInNpZ25hdHVyZSI6Ik5XSEpmMVBNUlhNM1JId0w2UE5TV2poa3ptOXpSSkh6eW93L3JJOVo4elk9In0%3D
    jointoken: qBfMESaxydg5lnK7IYKjen0GpQ6kKYj8vXC9xgsA4Sq
`

	talosVersionsOut = `metadata:
    namespace: default
    type: TalosVersions.omni.sidero.dev
    id: 1.9.0
spec:
    version: 1.9.0
    compatiblekubernetesversions:
        - 1.31.4
        - 1.32.0
    deprecated: false
---
metadata:
    namespace: default
    type: TalosVersions.omni.sidero.dev
    id: 1.13.5
spec:
    version: 1.13.5
`
)

func TestParseOmnictl(t *testing.T) {
	t.Parallel()

	key, err := parseServiceAccountKey(infraProviderCreateOut)
	require.NoError(t, err)
	assert.Equal(t, "eyJuYW1lIjoiaW5mcmEtcHJvdmlkZXI6YW52aWwifQ==", key)

	_, err = parseServiceAccountKey("Your infra provider is ready\n")
	assert.Error(t, err)

	jc, err := parseProviderJoinConfig([]byte(providerJoinConfigOut))
	require.NoError(t, err)
	assert.Len(t, jc.KernelArgs, 3)
	assert.Equal(t, "qBfMESaxydg5lnK7IYKjen0GpQ6kKYj8vXC9xgsA4Sq", jc.JoinToken)
	assert.Contains(t, jc.Config, "kind: SideroLinkConfig")

	u, token, err := jc.SideroLinkAPI()
	require.NoError(t, err)
	assert.Equal(t, "10.77.0.3:8090", u.Host)
	assert.True(t, strings.HasPrefix(token, "v2:eyJ"), "the token, unescaped: %q", token)

	_, err = parseProviderJoinConfig([]byte("metadata: {}\nspec: {}\n"))
	assert.Error(t, err, "no kernel arguments")

	_, _, err = (&ProviderJoinConfig{KernelArgs: []string{"talos.events.sink=x"}}).SideroLinkAPI()
	assert.Error(t, err)

	versions, err := parseTalosVersions([]byte(talosVersionsOut))
	require.NoError(t, err)
	assert.Equal(t, []string{"1.9.0", "1.13.5"}, versions)

	versions, err = parseTalosVersions(nil)
	require.NoError(t, err)
	assert.Empty(t, versions)

	_, err = parseTalosVersions([]byte("spec: [not"))
	assert.Error(t, err)
}
