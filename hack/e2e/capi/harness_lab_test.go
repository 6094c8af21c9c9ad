//go:build lab

package capi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/internal/testprovider"
)

// tool is a manager built from its tools module (hack/tools/<dir>) into _out/tools by the
// Makefile's target of the same path (make capi-tools makes both): through the tool
// cache, so ~6 min each the first time on two cores, a copy after.
type tool struct {
	name, dir string
}

var (
	capiCore = tool{name: "capi-core-manager", dir: "hack/tools/cluster-api"}
	cabpt    = tool{name: "cabpt-manager", dir: "hack/tools/cabpt"}
)

// build returns the tool's binary, made by make.
func (tl tool) build(t testing.TB, root string) string {
	t.Helper()

	out := filepath.Join(root, "_out", "tools", tl.name)

	cmd := exec.Command("make", "--no-print-directory", out)
	cmd.Dir = root

	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "make %s: %s", out, b)

	return out
}

// moduleDir is the directory of module mod as the tools module dir resolves it.
func moduleDir(t testing.TB, root, dir, mod string) string {
	t.Helper()

	cmd := exec.Command("go", "-C", dir, "list", "-m", "-f", "{{.Dir}}", mod)
	cmd.Dir = root

	out, err := cmd.Output()
	require.NoError(t, err, "finding module %s from %s", mod, dir)

	return strings.TrimSpace(string(out))
}

// apiServer is envtest's kube-apiserver and etcd with Cluster API's core CRDs, their
// conversion and admission webhooks pointing at where the core manager serves them,
// CABPT's CRDs (with the contract label Cluster API looks for) and ours.
type apiServer struct {
	cfg        *rest.Config
	kubeconfig string
	webhooks   *envtest.WebhookInstallOptions
}

func startAPIServer(t testing.TB, root, capiDir, cabptDir, work string) *apiServer {
	t.Helper()

	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "_out", "tools", "envtest")
	}

	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Skipf("no kube-apiserver in %s (make envtest-assets builds it): %v", assets, err)
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(capiDir, "core", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		// Every CRD installed here converts through the core manager's /convert, as
		// Cluster API's kustomize patches make it.
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths:                   []string{filepath.Join(capiDir, "core", "config", "webhook", "manifests.yaml")},
			IgnoreSchemeConvertible: true,
		},
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}

	cfg, err := env.Start()
	require.NoError(t, err, "starting kube-apiserver and etcd")

	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})

	// CABPT's CRDs and ours apart, without the conversion patch: CABPT's v1alpha2 and
	// v1alpha3 have the same schema, ours one version.
	var crds []*apiextensionsv1.CustomResourceDefinition

	for _, name := range []string{"bootstrap.cluster.x-k8s.io_talosconfigs.yaml", "bootstrap.cluster.x-k8s.io_talosconfigtemplates.yaml"} {
		b, err := os.ReadFile(filepath.Join(cabptDir, "config", "crd", "bases", name))
		require.NoError(t, err)

		crd := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, yaml.Unmarshal(b, crd), name)

		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}

		crd.Labels["cluster.x-k8s.io/v1beta1"] = "v1alpha3"
		crd.Spec.Conversion = nil
		crds = append(crds, crd)
	}

	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		CRDs:  crds,
		Paths: []string{filepath.Join(root, "deploy", "capi", "crd")},
	})
	require.NoError(t, err, "installing CABPT's CRDs and ours")

	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"

	path := filepath.Join(work, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))

	return &apiServer{cfg: cfg, kubeconfig: path, webhooks: &env.WebhookInstallOptions}
}

// freePort is a loopback TCP port free a moment ago, never handed out twice.
func freePort(t testing.TB) int {
	t.Helper()

	port, err := freeport.TCP()
	require.NoError(t, err)

	return port
}

// process is one manager the test runs: its output is kept and printed if the test fails;
// it is stopped (SIGTERM, then SIGKILL) when the test ends, pass or fail.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *testprovider.LogBuffer
	done chan struct{}
	err  error
}

func startProcess(t testing.TB, name, kubeconfig, bin string, args ...string) *process {
	t.Helper()

	p := &process{name: name, out: &testprovider.LogBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	require.NoError(t, p.cmd.Start(), "starting %s", name)

	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()

	t.Cleanup(func() {
		p.stop()

		if t.Failed() {
			t.Logf("=== %s's output (%s):\n%s", name, p.err, p.out.String())
		}
	})

	return p
}

// stop ends the process and waits for it; stopping twice is stopping once.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}

	_ = p.cmd.Process.Signal(syscall.SIGTERM)

	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited says, while the test runs, whether the process ended early.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v; its last output:\n%s", p.name, p.err, tail(p.out.String(), 4000))
	default:
		return nil
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}

	return "…" + s[len(s)-n:]
}
