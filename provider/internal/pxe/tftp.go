package pxe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/pin/tftp/v3"
	"go.uber.org/zap"
)

// TFTPConfig configures the read-only TFTP server.
type TFTPConfig struct {
	// Root is the directory served. Default /usr/lib/ipxe.
	Root string
	// Listen is the UDP address listened on. Default ":69".
	Listen string
	// Files are extra files served under fixed names, e.g. "ipxe-arm64.efi" →
	// "/srv/ipxe/arm64/ipxe.efi". They take precedence over Root.
	Files map[string]string
	// BootFiles are names under Root that may resolve (through symlinks) outside Root:
	// the configured boot files (Debian's ipxe.efi is a symlink to /boot/ipxe.efi).
	BootFiles []string
	// Timeout is the per-packet retransmission timeout. Default 2s.
	Timeout time.Duration
	// BlockSize is the largest blksize accepted from clients. Default 1468 (Ethernet MTU).
	BlockSize int
}

// TFTP is a read-only TFTP server for boot files.
type TFTP struct {
	cfg     TFTPConfig
	root    string // absolute, symlinks resolved
	logger  *zap.Logger
	metrics *Metrics
}

var (
	errRefused  = errors.New("access refused")
	errNotFound = errors.New("file not found")
)

// NewTFTP checks the configuration; Run listens.
func NewTFTP(cfg TFTPConfig, logger *zap.Logger, metrics *Metrics) (*TFTP, error) {
	if cfg.Root == "" {
		cfg.Root = DefaultTFTPRoot
	}

	if cfg.Listen == "" {
		cfg.Listen = DefaultTFTPListen
	}

	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}

	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 1468
	}

	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("error resolving TFTP root %s: %w", cfg.Root, err)
	}

	if root, err = filepath.EvalSymlinks(root); err != nil {
		return nil, fmt.Errorf("error resolving TFTP root %s: %w", cfg.Root, err)
	}

	for name, p := range cfg.Files {
		if _, err := CleanTFTPPath(name); err != nil {
			return nil, fmt.Errorf("invalid TFTP file name %q: %w", name, err)
		}

		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("TFTP file %s: path %s is not absolute", name, p)
		}
	}

	if logger == nil {
		logger = zap.NewNop()
	}

	if metrics == nil {
		metrics = NewMetrics(nil)
	}

	return &TFTP{cfg: cfg, root: root, logger: logger.With(zap.String("component", "tftp")), metrics: metrics}, nil
}

// CleanTFTPPath turns a requested file name into a clean relative path, or refuses it:
// empty names, NUL bytes, backslashes, absolute paths and any ".." element are refused
// rather than rewritten, so no request can name a file outside the root. A single leading
// "/" is tolerated: some firmware sends "/undionly.kpxe".
func CleanTFTPPath(name string) (string, error) {
	name = strings.TrimPrefix(name, "/")

	switch {
	case name == "", len(name) > 255:
		return "", errRefused
	case strings.ContainsAny(name, "\x00\\"), strings.HasPrefix(name, "/"):
		return "", errRefused
	}

	for elem := range strings.SplitSeq(name, "/") {
		if elem == ".." {
			return "", errRefused
		}
	}

	clean := path.Clean(name)
	if clean == "." || !fs.ValidPath(clean) {
		return "", errRefused
	}

	return clean, nil
}

// resolve returns the file to serve for a requested name.
func (t *TFTP) resolve(name string) (string, error) {
	clean, err := CleanTFTPPath(name)
	if err != nil {
		return "", err
	}

	if p, ok := t.cfg.Files[clean]; ok {
		return p, nil
	}

	real, err := filepath.EvalSymlinks(filepath.Join(t.root, filepath.FromSlash(clean)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", errNotFound
		}

		return "", fmt.Errorf("error resolving %s: %w", clean, err)
	}

	if real != t.root && !strings.HasPrefix(real, t.root+string(filepath.Separator)) {
		for _, b := range t.cfg.BootFiles {
			if b == clean {
				return real, nil
			}
		}

		return "", errRefused
	}

	return real, nil
}

// Run listens and serves until ctx is done. The socket is bound before Run returns an
// error or starts serving, so a bind failure is reported.
func (t *TFTP) Run(ctx context.Context) error {
	addr, err := net.ResolveUDPAddr("udp", t.cfg.Listen)
	if err != nil {
		return fmt.Errorf("error resolving TFTP listen address %s: %w", t.cfg.Listen, err)
	}

	conn, err := net.ListenUDP("udp", addr)
	if err != nil {
		return fmt.Errorf("error binding TFTP %s: %w", t.cfg.Listen, err)
	}

	return t.Serve(ctx, conn)
}

// Serve serves on an open socket until ctx is done, and closes it.
func (t *TFTP) Serve(ctx context.Context, conn *net.UDPConn) error {
	// A nil write handler makes pin/tftp refuse write requests.
	srv := tftp.NewServer(t.read, nil)
	srv.SetTimeout(t.cfg.Timeout)
	srv.SetBlockSize(t.cfg.BlockSize)
	srv.SetRetries(5)
	srv.SetHook(tftpHook{t})

	t.logger.Info("serving TFTP", zap.Stringer("address", conn.LocalAddr()), zap.String("root", t.root))

	done := make(chan error, 1)

	go func() { done <- srv.Serve(conn) }()

	select {
	case err := <-done:
		conn.Close()

		if err != nil {
			return fmt.Errorf("error serving TFTP: %w", err)
		}

		return nil
	case <-ctx.Done():
		// Shutdown closes the socket and waits for running transfers (each bounded by
		// timeout × retries).
		srv.Shutdown()
		<-done //nolint:errcheck // what Serve says after Shutdown is not news

		return nil
	}
}

func (t *TFTP) read(name string, rf io.ReaderFrom) error {
	var remote string
	if ot, ok := rf.(tftp.OutgoingTransfer); ok {
		ra := ot.RemoteAddr()
		remote = ra.String()
	}

	p, err := t.resolve(name)
	if err != nil {
		reason := "refused"
		if errors.Is(err, errNotFound) {
			reason = "not_found"
		}

		t.metrics.tftpErrors.WithLabelValues(reason).Inc()
		t.logger.Debug("TFTP request refused", zap.String("file", name), zap.String("remote", remote), zap.Error(err))

		return fmt.Errorf("%s: %w", name, err)
	}

	f, err := os.Open(p)
	if err != nil {
		t.metrics.tftpErrors.WithLabelValues("open").Inc()
		t.logger.Debug("error opening TFTP file", zap.String("file", name), zap.Error(err))

		return fmt.Errorf("%s: %w", name, errNotFound)
	}
	defer f.Close()

	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		t.metrics.tftpErrors.WithLabelValues("refused").Inc()

		return fmt.Errorf("%s: %w", name, errRefused)
	}

	n, err := rf.ReadFrom(f)
	t.metrics.tftpBytes.Add(float64(n))

	if err != nil {
		return fmt.Errorf("error sending %s to %s: %w", name, remote, err)
	}

	t.logger.Debug("TFTP transfer done", zap.String("file", name), zap.String("remote", remote), zap.Int64("bytes", n))

	return nil
}

// tftpHook counts transfers by result.
type tftpHook struct{ t *TFTP }

func (h tftpHook) OnSuccess(tftp.TransferStats) {
	h.t.metrics.tftpTransfers.WithLabelValues("success").Inc()
}

func (h tftpHook) OnFailure(_ tftp.TransferStats, err error) {
	h.t.metrics.tftpTransfers.WithLabelValues("failure").Inc()
	h.t.logger.Debug("TFTP transfer failed", zap.Error(err))
}
