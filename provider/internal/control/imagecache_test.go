package control_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
)

var (
	schematicA = strings.Repeat("a", 64)
	schematicB = strings.Repeat("b", 64)
)

// fakeCache holds blobs in memory; pullErr fails Pull.
type fakeCache struct {
	blobs   []imagecache.Blob
	pulled  []imagecache.Key
	pullErr error
}

func (c *fakeCache) List() []imagecache.Blob { return slices.Clone(c.blobs) }

func (c *fakeCache) Pull(_ context.Context, k imagecache.Key) (imagecache.Blob, error) {
	if c.pullErr != nil {
		return imagecache.Blob{}, c.pullErr
	}

	c.pulled = append(c.pulled, k)

	return imagecache.Blob{Key: k, Digest: "sha256:" + strings.Repeat("0", 64), Size: 42}, nil
}

func (c *fakeCache) Prune(_ context.Context, keep func(imagecache.Key) bool) ([]imagecache.Blob, error) {
	var removed []imagecache.Blob

	c.blobs = slices.DeleteFunc(c.blobs, func(b imagecache.Blob) bool {
		if keep != nil && keep(b.Key) {
			return false
		}

		removed = append(removed, b)

		return true
	})

	return removed, nil
}

func TestImageCachePull(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name    string
		req     *controlv1.PullImageCacheRequest
		pullErr error
		files   []string
		code    codes.Code
		msg     string
	}{
		{
			name:  "amd64 by default",
			req:   &controlv1.PullImageCacheRequest{Schematic: schematicA, Version: "v1.9.0"},
			files: []string{"kernel-amd64", "initramfs-amd64.xz", "cmdline-metal-amd64"},
		},
		{
			name:  "arm64",
			req:   &controlv1.PullImageCacheRequest{Schematic: schematicA, Version: "v1.9.0", Arch: "arm64"},
			files: []string{"kernel-arm64", "initramfs-arm64.xz", "cmdline-metal-arm64"},
		},
		{
			name: "bad arch",
			req:  &controlv1.PullImageCacheRequest{Schematic: schematicA, Version: "v1.9.0", Arch: "riscv64"},
			code: codes.InvalidArgument, msg: `architecture "riscv64"`,
		},
		{
			name: "bad schematic",
			req:  &controlv1.PullImageCacheRequest{Schematic: "default", Version: "v1.9.0"},
			code: codes.InvalidArgument, msg: `schematic "default" is not 64 lowercase hex digits`,
		},
		{
			name: "bad version",
			req:  &controlv1.PullImageCacheRequest{Schematic: schematicA, Version: "latest"},
			code: codes.InvalidArgument, msg: `version "latest"`,
		},
		{
			name:    "factory unreachable",
			req:     &controlv1.PullImageCacheRequest{Schematic: schematicA, Version: "v1.9.0"},
			pullErr: fmt.Errorf("boot asset x is not cached and %w at https://factory", imagecache.ErrFactoryUnreachable),
			code:    codes.Unavailable, msg: "could not be reached",
		},
		{
			name:    "unknown to the factory",
			req:     &controlv1.PullImageCacheRequest{Schematic: schematicA, Version: "v1.9.0"},
			pullErr: &imagecache.FactoryStatusError{Status: http.StatusNotFound, Factory: "https://factory"},
			code:    codes.NotFound, msg: "answered 404",
		},
		{
			name:    "factory failing",
			req:     &controlv1.PullImageCacheRequest{Schematic: schematicA, Version: "v1.9.0"},
			pullErr: &imagecache.FactoryStatusError{Status: http.StatusBadGateway, Factory: "https://factory"},
			code:    codes.Unavailable, msg: "answered 502",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			cache := &fakeCache{pullErr: tc.pullErr}

			resp, err := control.NewImageCacheService(cache).PullImageCache(t.Context(), tc.req)
			if tc.code != codes.OK {
				assert.Equal(t, tc.code, status.Code(err), "%v", err)
				assert.Contains(t, status.Convert(err).Message(), tc.msg)

				return
			}

			require.NoError(t, err)

			var files []string
			for _, img := range resp.GetImages() {
				files = append(files, img.GetFile())
				assert.Equal(t, schematicA, img.GetSchematic())
				assert.Equal(t, int64(42), img.GetSize())
			}

			assert.Equal(t, tc.files, files)
		})
	}
}

func TestImageCachePrune(t *testing.T) {
	t.Parallel()

	now := time.Now()
	blob := func(schematic, version string, usedAgo time.Duration) imagecache.Blob {
		return imagecache.Blob{
			Key:    imagecache.Key{Schematic: schematic, Version: version, File: "kernel-amd64"},
			Digest: "sha256:" + strings.Repeat("1", 64), Size: 1, FetchedAt: now.Add(-48 * time.Hour), UsedAt: now.Add(-usedAgo),
		}
	}

	all := []imagecache.Blob{
		blob(schematicA, "v1.9.0", 72*time.Hour),
		blob(schematicA, "v1.9.1", time.Minute),
		blob(schematicB, "v1.9.0", 72*time.Hour),
	}

	for _, tc := range []struct {
		name    string
		req     *controlv1.PruneImageCacheRequest
		removed []string // schematic[:1]/version
		code    codes.Code
		msg     string
	}{
		{name: "all", req: &controlv1.PruneImageCacheRequest{All: true}, removed: []string{"a/v1.9.0", "a/v1.9.1", "b/v1.9.0"}},
		{
			name:    "older than a day",
			req:     &controlv1.PruneImageCacheRequest{OlderThanSeconds: 86400},
			removed: []string{"a/v1.9.0", "b/v1.9.0"},
		},
		{
			name:    "older than a day, keeping a schematic",
			req:     &controlv1.PruneImageCacheRequest{OlderThanSeconds: 86400, KeepSchematics: []string{schematicB}},
			removed: []string{"a/v1.9.0"},
		},
		{
			name:    "all but a schematic",
			req:     &controlv1.PruneImageCacheRequest{KeepSchematics: []string{schematicA}},
			removed: []string{"b/v1.9.0"},
		},
		{name: "nothing said", req: &controlv1.PruneImageCacheRequest{}, code: codes.InvalidArgument, msg: "say what to prune"},
		{
			name: "all and older than", req: &controlv1.PruneImageCacheRequest{All: true, OlderThanSeconds: 60},
			code: codes.InvalidArgument, msg: "exclude each other",
		},
		{name: "negative age", req: &controlv1.PruneImageCacheRequest{OlderThanSeconds: -1}, code: codes.InvalidArgument, msg: "negative"},
		{
			name: "bad schematic kept", req: &controlv1.PruneImageCacheRequest{All: true, KeepSchematics: []string{"abc"}},
			code: codes.InvalidArgument, msg: `schematic "abc"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			cache := &fakeCache{blobs: slices.Clone(all)}

			resp, err := control.NewImageCacheService(cache).PruneImageCache(t.Context(), tc.req)
			if tc.code != codes.OK {
				assert.Equal(t, tc.code, status.Code(err), "%v", err)
				assert.Contains(t, status.Convert(err).Message(), tc.msg)
				assert.Len(t, cache.blobs, len(all), "nothing removed")

				return
			}

			require.NoError(t, err)

			var removed []string
			for _, img := range resp.GetRemoved() {
				removed = append(removed, img.GetSchematic()[:1]+"/"+img.GetVersion())
			}

			assert.Equal(t, tc.removed, removed)
			assert.Len(t, cache.blobs, len(all)-len(tc.removed))
		})
	}
}

func TestImageCacheList(t *testing.T) {
	t.Parallel()

	used := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cache := &fakeCache{blobs: []imagecache.Blob{{
		Key:    imagecache.Key{Schematic: schematicA, Version: "v1.9.0", File: "initramfs-amd64.xz"},
		Digest: "sha256:" + strings.Repeat("2", 64), Size: 7, FetchedAt: used.Add(-time.Hour), UsedAt: used,
	}}}

	resp, err := control.NewImageCacheService(cache).ListImageCache(t.Context(), &controlv1.ListImageCacheRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetImages(), 1)

	img := resp.GetImages()[0]
	assert.Equal(t, "initramfs-amd64.xz", img.GetFile())
	assert.Equal(t, "2026-01-02T02:04:05Z", img.GetFetchedAt())
	assert.Equal(t, "2026-01-02T03:04:05Z", img.GetUsedAt())
}

// TestImageCacheNone: a provider without a cache says so on every call.
func TestImageCacheNone(t *testing.T) {
	t.Parallel()

	svc := control.NewImageCacheService(nil)

	_, err := svc.ListImageCache(t.Context(), &controlv1.ListImageCacheRequest{})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "without an image cache")

	_, err = svc.PullImageCache(t.Context(), &controlv1.PullImageCacheRequest{Schematic: schematicA, Version: "v1.9.0"})
	assert.Equal(t, codes.Unavailable, status.Code(err))

	_, err = svc.PruneImageCache(t.Context(), &controlv1.PruneImageCacheRequest{All: true})
	assert.Equal(t, codes.Unavailable, status.Code(err))
}
