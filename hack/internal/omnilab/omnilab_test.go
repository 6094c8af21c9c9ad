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
		"--embedded-discovery-service-enabled=false",
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
