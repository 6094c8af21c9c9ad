//go:build lab

package capirelease_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/anvil-metal/anvil/imager/internal/capirelease"
	"github.com/anvil-metal/anvil/internal/kubetest"
)

// clusterctlVar is clusterctl's variable syntax: ${VAR} or ${VAR:=default}.
var clusterctlVar = regexp.MustCompile(`\$\{([A-Z0-9_]+)(?::=([^}]*))?\}`)

// expand substitutes the variables as clusterctl does; one without a value or a default
// fails the test.
func expand(t *testing.T, in []byte, vars map[string]string) []byte {
	t.Helper()

	return clusterctlVar.ReplaceAllFunc(in, func(m []byte) []byte {
		sub := clusterctlVar.FindSubmatch(m)
		if v, ok := vars[string(sub[1])]; ok {
			return []byte(v)
		}

		require.NotNil(t, sub[2], "clusterctl variable %s has no value and no default", sub[1])

		return sub[2]
	})
}

// TestLabReleaseApplies: the release's infrastructure-components.yaml, its clusterctl
// variables given, applies to a real API server (with Cluster API's core CRDs, as a
// management cluster has): its CRDs are established and its manager's Deployment names
// the image and the endpoint.
func TestLabReleaseApplies(t *testing.T) {
	cfg := kubetest.Start(t, kubetest.ClusterAPICRDs(t))

	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, apiextensionsv1.AddToScheme(scheme))

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)

	const image = "ghcr.io/anvil-metal/anvil-capi-manager:v0.1.0-test"

	components, err := capirelease.Components(filepath.Join(kubetest.RepoRoot(), "deploy", "capi"), image)
	require.NoError(t, err)

	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	components = expand(t, components, map[string]string{
		"ANVIL_ENDPOINT": "tcp://10.5.0.2:50044", "ANVIL_CA_CERT_B64": b64("ca"), "ANVIL_CLIENT_CERT_B64": b64("cert"), "ANVIL_CLIENT_KEY_B64": b64("key"),
	})

	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(components), 4096)
	kinds := map[string]int{}

	for {
		var obj unstructured.Unstructured

		err := dec.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			break
		}

		require.NoError(t, err)

		if len(obj.Object) == 0 {
			continue
		}

		require.NoError(t, c.Create(t.Context(), &obj), "creating %s %s", obj.GetKind(), obj.GetName())
		kinds[obj.GetKind()]++
	}

	assert.Equal(t, map[string]int{
		"CustomResourceDefinition": 4, "ClusterRole": 1, "Namespace": 1, "ServiceAccount": 1, "ClusterRoleBinding": 1,
		"Role": 1, "RoleBinding": 1, "Secret": 1, "Deployment": 1,
	}, kinds)

	for _, name := range []string{"metalclusters", "metalmachines", "metalmachinetemplates", "servers"} {
		require.Eventually(t, func() bool {
			var crd apiextensionsv1.CustomResourceDefinition
			if c.Get(t.Context(), client.ObjectKey{Name: name + ".infrastructure.cluster.x-k8s.io"}, &crd) != nil {
				return false
			}

			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					// Cluster API finds a kind's version by its contract label; Server is ours alone.
					return name == "servers" || crd.Labels["cluster.x-k8s.io/v1beta2"] == "v1beta1"
				}
			}

			return false
		}, time.Minute, 250*time.Millisecond, "CRD %s established, with the contract label", name)
	}

	var d appsv1.Deployment
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "anvil-capi-system", Name: "anvil-capi-manager"}, &d))
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	assert.Equal(t, image, d.Spec.Template.Spec.Containers[0].Image)
	assert.Contains(t, d.Spec.Template.Spec.Containers[0].Args, "--anvil-endpoint=tcp://10.5.0.2:50044")
	assert.Contains(t, d.Spec.Template.Spec.Containers[0].Args, "--talos-version=v1.13.0")
}
