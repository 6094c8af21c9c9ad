package service

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/imagecache"
)

// openImageCache opens the cache of Talos boot assets the provider serves machines in
// the factory's stead: in --image-cache-dir (<state-dir>/image-cache by default),
// bounded by --image-cache-size. A size of 0 turns it off (nil): Talos then boots from
// the Image Factory's PXE endpoint, and never by kexec, which needs the assets here.
func openImageCache(opts Options, registry *prometheus.Registry, logger *zap.Logger) (*imagecache.Cache, error) {
	if strings.TrimSpace(opts.ImageCacheSize) == "0" {
		logger.Info("image cache off: Talos boots from the Image Factory's PXE endpoint, never by kexec")

		return nil, nil //nolint:nilnil // no cache is a choice, not an error
	}

	size, err := parseSize("--image-cache-size", opts.ImageCacheSize)
	if err != nil {
		return nil, err
	}

	dir := opts.ImageCacheDir
	if dir == "" {
		dir = filepath.Join(opts.StateDir, "image-cache")
	}

	cache, err := imagecache.New(imagecache.Options{
		Dir:            dir,
		MaxBytes:       size,
		FactoryBaseURL: opts.ImageFactoryBaseURL,
		Registry:       registry,
		Logger:         logger,
	})
	if err != nil {
		return nil, fmt.Errorf("error opening the image cache: %w", err)
	}

	return cache, nil
}
