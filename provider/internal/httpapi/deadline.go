package httpapi

import (
	"io"
	"math"
	"net/http"
	"time"
)

// asset serves a boot asset under a write deadline that moves on as the download
// progresses (assetWriteStall), in place of the server's WriteTimeout, which would cut
// off a big download on a slow link.
func (s *Server) asset(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h(newProgressWriter(w, s.assetStall), r)
	}
}

// progressWriter sets the connection's write deadline stall ahead before each write of at
// most assetChunk bytes: a client that reads on gets the whole response, one that stops
// reading is cut off stall later.
type progressWriter struct {
	http.ResponseWriter

	rc    *http.ResponseController
	stall time.Duration
}

func newProgressWriter(w http.ResponseWriter, stall time.Duration) *progressWriter {
	pw := &progressWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: stall}

	// No deadline until the response starts: the image cache may still be fetching the
	// asset, and HTTP/2 resets a stream when its deadline passes, writing or not.
	pw.deadline(time.Time{})

	return pw
}

// deadline sets the write deadline. A writer without deadlines (a test's recorder) has
// nothing to bound.
func (w *progressWriter) deadline(t time.Time) {
	_ = w.rc.SetWriteDeadline(t) // http.ErrNotSupported: see above
}

func (w *progressWriter) extend() { w.deadline(time.Now().Add(w.stall)) }

// WriteHeader implements http.ResponseWriter.
func (w *progressWriter) WriteHeader(code int) {
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *progressWriter) Write(b []byte) (int, error) {
	n := 0

	for len(b) > 0 {
		w.extend()

		m, err := w.ResponseWriter.Write(b[:min(len(b), assetChunk)])
		n += m

		if err != nil {
			return n, err //nolint:wrapcheck // the ResponseWriter's own error, as a Write returns it
		}

		b = b[m:]
	}

	return n, nil
}

// ReadFrom copies src in chunks of assetChunk, each under a new deadline. A sized source
// (http.ServeContent's io.LimitReader over the file) is unwrapped, so that each chunk is
// an io.LimitedReader of the file itself, which net/http still hands to sendfile(2).
func (w *progressWriter) ReadFrom(src io.Reader) (int64, error) {
	r, left := src, int64(math.MaxInt64)

	lr, sized := src.(*io.LimitedReader)
	if sized {
		r, left = lr.R, lr.N
	}

	var total int64

	for left > 0 {
		w.extend()

		chunk := &io.LimitedReader{R: r, N: min(left, assetChunk)}
		n, err := io.Copy(w.ResponseWriter, chunk)
		total += n
		left -= n

		if err != nil || chunk.N > 0 { // failed, or the source ended
			if sized {
				lr.N = left
			}

			return total, err //nolint:wrapcheck // as io.Copy returns it
		}
	}

	if sized {
		lr.N = left
	}

	return total, nil
}

// Unwrap lets http.ResponseController reach the connection.
func (w *progressWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
