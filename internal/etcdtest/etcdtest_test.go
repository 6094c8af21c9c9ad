package etcdtest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanInNamespacesNamesEveryMemberOnEtcdsPorts(t *testing.T) {
	t.Parallel()

	members, err := plan(Config{
		Members:    2,
		Dir:        "/srv/etcd",
		Hosts:      []string{"10.0.0.1", "10.0.0.2"},
		Namespaces: []string{"ns-a", "ns-b"},
	})
	require.NoError(t, err)

	assert.Equal(t, "m0=https://10.0.0.1:2380,m1=https://10.0.0.2:2380", initialCluster(members))
	assert.Equal(t, "ns-b", members[1].ns)
	assert.Equal(t, "https://10.0.0.2:2379", members[1].clientURL())
	assert.Equal(t, "/srv/etcd/data-1", members[1].dataDir)
	assert.Equal(t, "/srv/etcd/etcd-1.log", members[1].log)

	members[1].tls = TLSFiles{CA: "/p/ca.crt", Cert: "/p/member-1.crt", Key: "/p/member-1.key"}

	args := members[1].args(initialCluster(members), "existing", 1<<30)
	for _, want := range []string{
		"--name=m1",
		"--listen-client-urls=https://10.0.0.2:2379",
		"--listen-peer-urls=https://10.0.0.2:2380",
		"--initial-cluster=m0=https://10.0.0.1:2380,m1=https://10.0.0.2:2380",
		"--initial-cluster-state=existing",
		"--client-cert-auth",
		"--peer-client-cert-auth",
		"--trusted-ca-file=/p/ca.crt",
		"--peer-key-file=/p/member-1.key",
		"--quota-backend-bytes=1073741824",
		"--auto-compaction-mode=revision",
	} {
		assert.Contains(t, args, want)
	}

	for _, a := range members[0].args("", "new", 0) {
		assert.False(t, strings.HasPrefix(a, "--quota-backend-bytes"), "no quota set, etcd's default: %s", a)
	}
}

func TestPlanOnLoopbackDrawsFreePorts(t *testing.T) {
	t.Parallel()

	members, err := plan(Config{Dir: t.TempDir()})
	require.NoError(t, err)
	require.Len(t, members, 3, "three members unless told")

	seen := map[int]bool{}

	for _, m := range members {
		assert.Equal(t, "127.0.0.1", m.host)
		assert.Empty(t, m.ns)

		for _, p := range []int{m.clientPort, m.peerPort} {
			assert.False(t, seen[p], "port %d twice", p)
			seen[p] = true
		}
	}
}

func TestPlanRefusesWhatCannotRun(t *testing.T) {
	t.Parallel()

	for name, cfg := range map[string]Config{
		"no directory":             {},
		"negative members":         {Dir: "/d", Members: -1},
		"hosts short":              {Dir: "/d", Hosts: []string{"10.0.0.1"}},
		"namespaces short":         {Dir: "/d", Members: 1, Hosts: []string{"10.0.0.1"}, Namespaces: []string{"a", "b"}},
		"namespaces without hosts": {Dir: "/d", Members: 1, Namespaces: []string{"a"}},
	} {
		_, err := plan(cfg)
		assert.Error(t, err, name)
	}
}

func TestCertificatesNameTheirHostsAndServeTheirRoles(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()

	p, err := writePKI(dir, []string{"10.1.2.3", "127.0.0.1"})
	require.NoError(t, err)
	require.Len(t, p.members, 2)

	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, p.client.CA))

	verify := func(files TLSFiles, host string, usage x509.ExtKeyUsage) error {
		t.Helper()

		assert.Equal(t, p.client.CA, files.CA)

		_, err := tls.LoadX509KeyPair(files.Cert, files.Key)
		require.NoError(t, err)

		st, err := os.Stat(files.Key)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "a key is the owner's alone")

		_, err = readCert(t, files.Cert).Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}})

		return err
	}

	// Member 0 serves on its host, 127.0.0.1 and localhost, and is a client to its peers.
	for _, host := range []string{"10.1.2.3", "127.0.0.1", "localhost"} {
		require.NoError(t, verify(p.members[0], host, x509.ExtKeyUsageServerAuth), host)
	}

	require.NoError(t, verify(p.members[0], "", x509.ExtKeyUsageClientAuth))
	require.Error(t, verify(p.members[0], "10.1.2.4", x509.ExtKeyUsageServerAuth), "another host")
	assert.Len(t, readCert(t, p.members[1].Cert).IPAddresses, 1, "127.0.0.1 once")
	assert.True(t, readCert(t, p.members[1].Cert).IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)))

	// The client certificate is a client's only.
	require.NoError(t, verify(p.client, "", x509.ExtKeyUsageClientAuth))
	require.Error(t, verify(p.client, "", x509.ExtKeyUsageServerAuth))

	assert.FileExists(t, filepath.Join(dir, "ca.crt"))
	assert.NoFileExists(t, filepath.Join(dir, "ca.key"), "the CA's key stays in memory")
}

func TestWritePKIRefusesAHostThatIsNoIP(t *testing.T) {
	t.Parallel()

	_, err := writePKI(t.TempDir(), []string{"etcd.example"})
	assert.ErrorContains(t, err, "no IP address")
}

func TestTailKeepsTheLastLines(t *testing.T) {
	t.Parallel()

	assert.Equal(t, "c\nd", string(tail([]byte("a\nb\nc\nd\n"), 2)))
	assert.Equal(t, "a\nb", string(tail([]byte("a\nb"), 5)))
	assert.Empty(t, string(tail(nil, 3)))
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()

	b, err := os.ReadFile(path)
	require.NoError(t, err)

	block, _ := pem.Decode(b)
	require.NotNil(t, block, "no PEM in %s", path)

	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)

	return cert
}
