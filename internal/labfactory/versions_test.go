package labfactory_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/siderolabs/image-factory/pkg/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/labfactory"
)

// TestVersions: the clients Omni asks for versions — the Image Factory's own client and
// go-containerregistry's tag listing — read the stand-in's Talos and Kubernetes versions.
func TestVersions(t *testing.T) {
	t.Parallel()

	srv := httptest.NewServer(labfactory.New())
	t.Cleanup(srv.Close)

	c, err := client.New(srv.URL)
	require.NoError(t, err)

	versions, err := c.Versions(t.Context())
	require.NoError(t, err)
	assert.Equal(t, labfactory.DefaultTalosVersions, versions)
	assert.Contains(t, versions, "v1.9.0", "the lab's Talos")

	broken, err := c.BrokenVersions(t.Context())
	require.NoError(t, err)
	assert.Empty(t, broken)

	extensions, err := c.ExtensionsVersions(t.Context(), "v1.9.0")
	require.NoError(t, err)
	assert.Empty(t, extensions)

	// As Omni asks: its TalosVersions drop the v.
	extensions, err = c.ExtensionsVersions(t.Context(), "1.9.0")
	require.NoError(t, err)
	assert.Empty(t, extensions)

	overlays, err := c.OverlaysVersions(t.Context(), "v1.9.0")
	require.NoError(t, err)
	assert.Empty(t, overlays)

	_, err = c.ExtensionsVersions(t.Context(), "v0.1.0")
	assert.Error(t, err, "a version the stand-in does not offer")

	// As Omni's VersionsController lists them (a loopback registry is spoken to over
	// plain HTTP, as an RFC 1918 one such as the lab's is).
	host := strings.TrimPrefix(srv.URL, "http://")

	repo, err := name.NewRepository(host + "/siderolabs/kubelet")
	require.NoError(t, err)

	tags, err := remote.List(repo, remote.WithContext(t.Context()))
	require.NoError(t, err)
	assert.Equal(t, labfactory.DefaultKubernetesVersions, tags)

	repo, err = name.NewRepository(host + "/siderolabs/installer")
	require.NoError(t, err)

	tags, err = remote.List(repo, remote.WithContext(t.Context()))
	require.NoError(t, err)
	assert.Equal(t, labfactory.DefaultTalosVersions, tags)

	repo, err = name.NewRepository(host + "/siderolabs/unknown")
	require.NoError(t, err)

	_, err = remote.List(repo, remote.WithContext(t.Context()))
	assert.ErrorContains(t, err, "NAME_UNKNOWN")
}

// TestVersionOptions: the versions are the lab's to choose.
func TestVersionOptions(t *testing.T) {
	t.Parallel()

	srv := httptest.NewServer(labfactory.New(
		labfactory.WithTalosVersions("v1.9.0", "v1.13.5"),
		labfactory.WithKubernetesVersions("v1.36.2"),
	))
	t.Cleanup(srv.Close)

	for path, want := range map[string]string{
		"/versions":                            `["v1.9.0","v1.13.5"]`,
		"/v2/siderolabs/kubelet/tags/list":     `{"name":"siderolabs/kubelet","tags":["v1.36.2"]}`,
		"/version/v1.13.5/extensions/official": `[]`,
		"/v2/":                                 `{}`,
	} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)

		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()

		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), path)
		assert.JSONEq(t, want, string(body), path)
	}

	resp, err := http.Post(srv.URL+"/versions", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "versions are read, not written")
}
