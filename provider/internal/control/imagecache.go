package control

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
)

// ImageCache is the provider's boot-asset cache as the control API uses it.
type ImageCache interface {
	List() []imagecache.Blob
	Pull(ctx context.Context, k imagecache.Key) (imagecache.Blob, error)
	Prune(ctx context.Context, keep func(imagecache.Key) bool) ([]imagecache.Blob, error)
}

// ImageCacheService is the image cache part of the control API: a thin adapter of the
// cache, which holds the rules.
type ImageCacheService struct {
	controlv1.UnimplementedImageCacheServiceServer

	cache ImageCache
	now   func() time.Time
}

// NewImageCacheService returns the gRPC image cache service over cache; a nil cache
// answers every call Unavailable.
func NewImageCacheService(cache ImageCache) *ImageCacheService {
	return &ImageCacheService{cache: cache, now: time.Now}
}

var errNoCache = status.Error(codes.Unavailable, "this provider runs without an image cache")

// ListImageCache implements controlv1.ImageCacheServiceServer.
func (s *ImageCacheService) ListImageCache(context.Context, *controlv1.ListImageCacheRequest) (*controlv1.ListImageCacheResponse, error) {
	if s.cache == nil {
		return nil, errNoCache
	}

	return &controlv1.ListImageCacheResponse{Images: blobsToProto(s.cache.List())}, nil
}

// PullImageCache implements controlv1.ImageCacheServiceServer.
func (s *ImageCacheService) PullImageCache(ctx context.Context, req *controlv1.PullImageCacheRequest) (*controlv1.PullImageCacheResponse, error) {
	if s.cache == nil {
		return nil, errNoCache
	}

	arch := req.GetArch()
	if arch == "" {
		arch = "amd64"
	}

	files, err := imagecache.FilesFor(arch)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	keys := make([]imagecache.Key, 0, 3)
	for _, file := range files.All() {
		k := imagecache.Key{Schematic: req.GetSchematic(), Version: req.GetVersion(), File: file}
		if err := k.Validate(); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}

		keys = append(keys, k)
	}

	blobs := make([]imagecache.Blob, 0, len(keys))

	for _, k := range keys {
		b, err := s.cache.Pull(ctx, k)
		if err != nil {
			return nil, cacheStatus(err)
		}

		blobs = append(blobs, b)
	}

	return &controlv1.PullImageCacheResponse{Images: blobsToProto(blobs)}, nil
}

// PruneImageCache implements controlv1.ImageCacheServiceServer.
func (s *ImageCacheService) PruneImageCache(ctx context.Context, req *controlv1.PruneImageCacheRequest) (*controlv1.PruneImageCacheResponse, error) {
	if s.cache == nil {
		return nil, errNoCache
	}

	keepSchematics := req.GetKeepSchematics()
	olderThan := time.Duration(req.GetOlderThanSeconds()) * time.Second

	switch {
	case req.GetOlderThanSeconds() < 0:
		return nil, status.Error(codes.InvalidArgument, "older_than_seconds must not be negative")
	case req.GetAll() && olderThan > 0:
		return nil, status.Error(codes.InvalidArgument, "all and older_than exclude each other")
	case !req.GetAll() && olderThan == 0 && len(keepSchematics) == 0:
		return nil, status.Error(codes.InvalidArgument, "say what to prune: all, older_than or keep_schematics")
	}

	for _, id := range keepSchematics {
		if err := imagecache.ValidateSchematic(id); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}

	// The cache asks by key; when each was last used is in its listing.
	cutoff := s.now().Add(-olderThan)
	usedAt := map[imagecache.Key]time.Time{}

	for _, b := range s.cache.List() {
		usedAt[b.Key] = b.UsedAt
	}

	keep := func(k imagecache.Key) bool {
		if slices.Contains(keepSchematics, k.Schematic) {
			return true
		}

		if olderThan > 0 {
			used, ok := usedAt[k]

			// Fetched after the listing: in use.
			return !ok || used.After(cutoff)
		}

		return false
	}

	removed, err := s.cache.Prune(ctx, keep)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "error pruning the image cache (removed %d): %v", len(removed), err)
	}

	return &controlv1.PruneImageCacheResponse{Removed: blobsToProto(removed)}, nil
}

// cacheStatus maps a cache error onto a gRPC status.
func cacheStatus(err error) error {
	var fe *imagecache.FactoryStatusError

	switch {
	case errors.Is(err, imagecache.ErrInvalidKey):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.As(err, &fe) && fe.Status == http.StatusNotFound:
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, imagecache.ErrFactoryUnreachable), errors.Is(err, imagecache.ErrClosed), errors.As(err, &fe):
		return status.Error(codes.Unavailable, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

func blobsToProto(blobs []imagecache.Blob) []*controlv1.CachedImage {
	out := make([]*controlv1.CachedImage, 0, len(blobs))

	for _, b := range blobs {
		out = append(out, &controlv1.CachedImage{
			Schematic: b.Key.Schematic,
			Version:   b.Key.Version,
			File:      b.Key.File,
			Digest:    b.Digest,
			Size:      b.Size,
			FetchedAt: b.FetchedAt.UTC().Format(time.RFC3339),
			UsedAt:    b.UsedAt.UTC().Format(time.RFC3339),
		})
	}

	return out
}
