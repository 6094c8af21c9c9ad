// Package kubetest runs a real Kubernetes API server for tests: kube-apiserver and etcd
// (built from their Go modules by make envtest-assets into _out/tools/envtest) through
// controller-runtime's envtest, with Cluster API's core CRDs from its Go module and the
// Cluster API provider's own (deploy/capi/crd).
package kubetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RepoRoot is the repository's root.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)

	return filepath.Join(filepath.Dir(file), "..", "..")
}

// ClusterAPICRDs is the directory of Cluster API's core CRDs in its Go module.
func ClusterAPICRDs(t *testing.T) string {
	t.Helper()

	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api")
	cmd.Dir = RepoRoot()

	out, err := cmd.Output()
	require.NoError(t, err, "finding Cluster API's module")

	return filepath.Join(strings.TrimSpace(string(out)), "core", "config", "crd", "bases")
}

// CRDs are the directories of Cluster API's core CRDs and ours.
func CRDs(t *testing.T) []string {
	t.Helper()

	return []string{ClusterAPICRDs(t), filepath.Join(RepoRoot(), "deploy", "capi", "crd")}
}

// Start runs the API server with the CRDs of the directories given, until the test ends. It skips the test, saying so, when the binaries are
// not built (make lab builds them first).
func Start(t *testing.T, crdDirs ...string) *rest.Config {
	t.Helper()

	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(RepoRoot(), "_out", "tools", "envtest")
	}

	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil { //nolint:gosec // the test environment names its own binaries
		t.Skipf("no kube-apiserver in %s (make envtest-assets builds it): %v", assets, err)
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        crdDirs,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}

	cfg, err := env.Start()
	require.NoError(t, err, "starting kube-apiserver and etcd")

	t.Cleanup(func() { require.NoError(t, env.Stop()) })

	return cfg
}
