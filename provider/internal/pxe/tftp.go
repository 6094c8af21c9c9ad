package pxe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/tftp"
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
	// WindowSize is the largest windowsize (RFC 7440) accepted from clients. Default 64.
	WindowSize int
	// MaxPerClient bounds the transfers in progress from one IP address. Default 4 (a
	// machine's firmware fetches one file at a time); more only where many machines
	// share an address (a NAT, a simulated fleet).
	MaxPerClient int
}

// TFTP is a read-only TFTP server for boot files.
type TFTP struct {
	cfg     TFTPConfig
	root    string // absolute, symlinks resolved
	logger  *zap.Logger
	metrics *Metrics
	srv     *tftp.Server
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

	t := &TFTP{cfg: cfg, root: root, logger: logger.With(zap.String("component", "tftp")), metrics: metrics}

	if t.srv, err = tftp.NewServer(tftp.Config{
		Open:          t.open,
		Done:          t.done,
		Timeout:       cfg.Timeout,
		Retries:       5,
		MaxBlockSize:  cfg.BlockSize,
		MaxWindowSize: cfg.WindowSize,
		// 0 is the server's default.
		MaxTransfersPerClient: cfg.MaxPerClient,
	}); err != nil {
		return nil, fmt.Errorf("error configuring TFTP: %w", err)
	}

	return t, nil
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

	// A rack powering on sends its read requests within a second: they must queue, not
	// drop and wait out the firmware's retransmission timer (the storm benchmark's long
	// tail was that).
	got, err := setReadBuffer(conn, readBuffer)
	if err != nil {
		conn.Close()

		return fmt.Errorf("error sizing the receive buffer of TFTP %s: %w", t.cfg.Listen, err)
	}

	// Linux reports double what was set: 2*asked means the socket got all it asked for.
	t.logger.Debug("TFTP receive buffer", zap.Int("asked", readBuffer), zap.Int("so_rcvbuf", got))

	return t.Serve(ctx, conn)
}

// Serve serves on an open socket until ctx is done, and closes it. Transfers in progress
// are stopped.
func (t *TFTP) Serve(ctx context.Context, conn *net.UDPConn) error {
	t.logger.Info("serving TFTP", zap.Stringer("address", conn.LocalAddr()), zap.String("root", t.root))

	if err := t.srv.Serve(ctx, conn); err != nil {
		return fmt.Errorf("error serving TFTP: %w", err)
	}

	return nil
}

// open resolves and opens a requested file for the server.
func (t *TFTP) open(_ context.Context, req *tftp.Request, remote netip.AddrPort) (io.ReaderAt, int64, error) {
	name := req.Filename

	p, err := t.resolve(name)
	if err != nil {
		reason, sentinel := "refused", tftp.ErrAccess
		if errors.Is(err, errNotFound) {
			reason, sentinel = "not_found", tftp.ErrNotFound
		}

		t.metrics.tftpErrors.WithLabelValues(reason).Inc()
		t.logger.Debug("TFTP request refused", zap.String("file", name), zap.Stringer("remote", remote), zap.Error(err))

		return nil, 0, fmt.Errorf("%s: %w: %w", name, err, sentinel)
	}

	f, err := os.Open(p)
	if err != nil {
		t.metrics.tftpErrors.WithLabelValues("open").Inc()
		t.logger.Debug("error opening TFTP file", zap.String("file", name), zap.Error(err))

		return nil, 0, fmt.Errorf("%s: %w", name, tftp.ErrNotFound)
	}

	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		t.metrics.tftpErrors.WithLabelValues("refused").Inc()

		return nil, 0, fmt.Errorf("%s: %w", name, tftp.ErrAccess)
	}

	return f, st.Size(), nil
}

// done counts and logs a finished request. Requests refused before a transfer started
// (no such file, refused path) were counted by open.
func (t *TFTP) done(tr tftp.Transfer) {
	t.metrics.tftpBytes.Add(float64(tr.Stats.Bytes))

	fields := []zap.Field{zap.Stringer("remote", tr.Remote), zap.Duration("took", tr.Took)}
	if tr.Request != nil {
		fields = append(fields, zap.String("file", tr.Request.Filename))
	}

	switch {
	case tr.Err == nil:
		t.metrics.tftpTransfers.WithLabelValues("success").Inc()
		t.logger.Debug("TFTP transfer done", append(fields, zap.Int64("bytes", tr.Stats.Bytes),
			zap.Int("blksize", tr.BlockSize), zap.Int("windowsize", tr.WindowSize),
			zap.Uint64("retransmits", tr.Stats.Retransmits), zap.Uint64("writes", tr.Stats.Writes))...)
	case errors.Is(tr.Err, tftp.ErrNotFound), errors.Is(tr.Err, tftp.ErrAccess):
	case errors.Is(tr.Err, tftp.ErrMalformed):
		t.metrics.tftpErrors.WithLabelValues("malformed").Inc()
		t.logger.Debug("malformed TFTP request", append(fields, zap.Error(tr.Err))...)
	case errors.Is(tr.Err, tftp.ErrClientBusy):
		t.metrics.tftpErrors.WithLabelValues("client_busy").Inc()
		t.logger.Debug("TFTP request refused: too many transfers from this address", fields...)
	case errors.Is(tr.Err, tftp.ErrBusy):
		t.metrics.tftpErrors.WithLabelValues("busy").Inc()
		t.logger.Debug("TFTP request refused: too many transfers", fields...)
	case !tr.Started:
		// A write, a refused mode or option value.
		t.metrics.tftpErrors.WithLabelValues("refused").Inc()
		t.logger.Debug("TFTP request refused", append(fields, zap.Error(tr.Err))...)
	case isProbe(tr):
		// UEFI firmware asks for tsize, reads the OACK and ends the transfer with an
		// ERROR before taking data: how it learns the size, not a failure.
		t.metrics.tftpTransfers.WithLabelValues("aborted").Inc()
		t.logger.Debug("TFTP transfer ended by the client after the OACK", append(fields, zap.Error(tr.Err))...)
	default:
		t.metrics.tftpTransfers.WithLabelValues("failure").Inc()
		t.logger.Debug("TFTP transfer failed", append(fields, zap.Int64("bytes", tr.Stats.Bytes), zap.Error(tr.Err))...)
	}
}

// isProbe reports whether the client ended the transfer with an ERROR before any data
// was sent.
func isProbe(tr tftp.Transfer) bool {
	var re *tftp.RemoteError

	return tr.Stats.Blocks == 0 && errors.As(tr.Err, &re)
}
