package labfactory_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/siderolabs/image-factory/pkg/client"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/labfactory"
)

// TestWithFactoryClient: the Image Factory's own client registers schematics with it.
func TestWithFactoryClient(t *testing.T) {
	t.Parallel()

	f := labfactory.New()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)

	c, err := client.New(srv.URL)
	require.NoError(t, err)

	var sc schematic.Schematic

	sc.Customization.SystemExtensions.OfficialExtensions = []string{"siderolabs/intel-ucode"}

	id, _, err := c.SchematicCreate(t.Context(), sc)
	require.NoError(t, err)

	want, err := sc.ID()
	require.NoError(t, err)
	assert.Equal(t, want, id)
	assert.Equal(t, []string{id}, f.Registered())

	doc, ok := f.Schematic(id)
	assert.True(t, ok)
	assert.Contains(t, string(doc), "siderolabs/intel-ucode")

	resp, err := http.Post(srv.URL+"/schematics", "application/yaml", strings.NewReader("customization: [not a map"))
	require.NoError(t, err)
	resp.Body.Close() //nolint:errcheck
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}
