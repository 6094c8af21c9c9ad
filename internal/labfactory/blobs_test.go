package labfactory

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/installerimage"
)

func sha(b []byte) v1.Hash {
	sum := sha256.Sum256(b)

	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// TestBlobStore: the registry's blobs — pushed ones (image configs) in memory up to
// maxPutBlob, their digest checked; layers served from their files, never pushed.
func TestBlobStore(t *testing.T) {
	t.Parallel()

	blobs := &blobStore{files: map[string]string{}, data: map[string][]byte{}}
	reg := registry.New(registry.WithBlobHandler(blobs), registry.Logger(log.New(io.Discard, "", 0)))

	push := func(body []byte, digest v1.Hash) int {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v2/metal-installer/x/blobs/uploads/?digest="+digest.String(), bytes.NewReader(body))
		w := httptest.NewRecorder()
		reg.ServeHTTP(w, r)

		return w.Code
	}

	for _, tc := range []struct {
		name   string
		size   int
		digest func(b []byte) v1.Hash
		stored bool
	}{
		{name: "a config", size: 1234, stored: true},
		{name: "the largest", size: maxPutBlob, stored: true},
		{name: "a byte too large", size: maxPutBlob + 1},
		{name: "a layer's size", size: 8 << 20},
		{name: "a wrong digest", size: 100, digest: func([]byte) v1.Hash { return sha([]byte("other")) }},
	} {
		body := bytes.Repeat([]byte(tc.name[:1]), tc.size)

		digest := sha(body)
		if tc.digest != nil {
			digest = tc.digest(body)
		}

		status := push(body, digest)

		_, err := blobs.Stat(t.Context(), "metal-installer/x", sha(body))
		if !tc.stored {
			assert.GreaterOrEqual(t, status, 400, tc.name)
			assert.ErrorIs(t, err, registry.ErrNotFound, tc.name)

			continue
		}

		assert.Equal(t, http.StatusCreated, status, tc.name)
		require.NoError(t, err, tc.name)

		rc, err := blobs.Get(t.Context(), "metal-installer/x", sha(body))
		require.NoError(t, err)

		got, err := io.ReadAll(rc)
		require.NoError(t, err)
		require.NoError(t, rc.Close())
		assert.True(t, bytes.Equal(body, got), tc.name)
	}

	// A layer from its file: its size and bytes, through the registry.
	p := filepath.Join(t.TempDir(), "layer.tar")
	require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte("layer"), 1<<20), 0o644))

	l, err := installerimage.LayerFromFile(p)
	require.NoError(t, err)

	blobs.addLayer(l)

	d, err := l.Digest()
	require.NoError(t, err)

	size, err := blobs.Stat(t.Context(), "any", d)
	require.NoError(t, err)
	assert.EqualValues(t, 5<<20, size)

	w := httptest.NewRecorder()
	reg.ServeHTTP(w, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v2/metal-installer/x/blobs/"+d.String(), nil))
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, 5<<20, w.Body.Len())

	_, err = blobs.Get(t.Context(), "any", sha([]byte("nothing")))
	assert.ErrorIs(t, err, registry.ErrNotFound)
}
