package imagecache

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	hits, misses prometheus.Counter
	downloads    *prometheus.CounterVec
	bytes        prometheus.Counter
	evictions    prometheus.Counter
	corrupt      prometheus.Counter
	size         prometheus.GaugeFunc
}

// newMetrics builds the cache's metrics; size reads the blobs' total when scraped.
func newMetrics(size func() int64) *metrics {
	m := &metrics{
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_image_cache_hits_total", Help: "Boot-asset requests served from the image cache.",
		}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_image_cache_misses_total", Help: "Boot-asset requests that waited for a download from the Image Factory.",
		}),
		downloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_image_cache_downloads_total", Help: "Downloads from the Image Factory, by result.",
		}, []string{"result"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_image_cache_downloaded_bytes_total", Help: "Bytes downloaded from the Image Factory.",
		}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_image_cache_evictions_total", Help: "Blobs evicted to keep the image cache within its size.",
		}),
		corrupt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_image_cache_corrupt_total", Help: "Cached blobs whose content no longer matched their digest (deleted and fetched again).",
		}),
		size: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "anvil_image_cache_size_bytes", Help: "Size of the blobs in the image cache.",
		}, func() float64 { return float64(size()) }),
	}

	// Both results exist from the start, at 0, for dashboards to find.
	for _, result := range []string{"ok", "error"} {
		m.downloads.WithLabelValues(result)
	}

	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	var errs []error

	for _, c := range []prometheus.Collector{m.hits, m.misses, m.downloads, m.bytes, m.evictions, m.corrupt, m.size} {
		errs = append(errs, reg.Register(c))
	}

	return errors.Join(errs...)
}
