package replica_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/replica"
)

// etcd holds every machine's secrets (sealed) and the election: a replica speaks to it
// over mutual TLS only, and says what is missing before it dials anything.
func TestDialRefusesWithoutTLS(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	assert.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))

	files := replica.ClientConfig{CA: notPEM, Cert: filepath.Join(dir, "c.crt"), Key: filepath.Join(dir, "c.key")}

	for _, tc := range []struct {
		name string
		cfg  replica.ClientConfig
		want string
	}{
		{"no endpoints", replica.ClientConfig{}, "no etcd endpoints"},
		{"plain http", replica.ClientConfig{Endpoints: []string{"http://127.0.0.1:2379"}, CA: files.CA, Cert: files.Cert, Key: files.Key}, "is not https://"},
		{"no scheme", replica.ClientConfig{Endpoints: []string{"127.0.0.1:2379"}, CA: files.CA, Cert: files.Cert, Key: files.Key}, "is not https://"},
		{"one of several plain", replica.ClientConfig{Endpoints: []string{"https://10.0.0.1:2379", "http://10.0.0.2:2379"}}, "http://10.0.0.2:2379"},
		{"no client certificate", replica.ClientConfig{Endpoints: []string{"https://127.0.0.1:2379"}, CA: files.CA}, "needs --etcd-ca, --etcd-cert and --etcd-key"},
		{"no CA", replica.ClientConfig{Endpoints: []string{"https://127.0.0.1:2379"}, Cert: files.Cert, Key: files.Key}, "needs --etcd-ca"},
		{"CA that is no PEM", replica.ClientConfig{Endpoints: []string{"https://127.0.0.1:2379"}, CA: files.CA, Cert: files.Cert, Key: files.Key}, "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			cli, err := replica.Dial(tc.cfg, zap.NewNop())
			assert.Nil(t, cli)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
