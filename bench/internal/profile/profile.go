// Package profile builds a provider that serves net/http/pprof on loopback, without
// touching the provider's sources (a go build -overlay adds one file to its main
// package), and captures and summarises CPU profiles from it.
package profile

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/anvil-metal/anvil/internal/proc"
)

// EnvAddr is the environment variable the profiling provider reads its pprof address from.
const EnvAddr = "ANVIL_BENCH_PPROF"

//go:embed pprof.go.txt
var pprofSource []byte

// BuildProvider builds ./provider/cmd/provider (from the module at repo) with the pprof
// file overlaid, into dir/provider-pprof.
func BuildProvider(ctx context.Context, repo, dir string) (string, error) {
	repo, err := filepath.Abs(repo)
	if err != nil {
		return "", fmt.Errorf("error resolving %s: %w", repo, err)
	}

	dir, err = filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("error resolving %s: %w", dir, err)
	}

	if err = os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("error creating %s: %w", dir, err)
	}

	src := filepath.Join(dir, "zz_bench_pprof.go")
	if err = os.WriteFile(src, pprofSource, 0o644); err != nil {
		return "", fmt.Errorf("error writing %s: %w", src, err)
	}

	overlay, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(repo, "provider", "cmd", "provider", "zz_bench_pprof.go"): src},
	})
	if err != nil {
		return "", fmt.Errorf("error encoding the overlay: %w", err)
	}

	overlayPath := filepath.Join(dir, "overlay.json")
	if err = os.WriteFile(overlayPath, overlay, 0o644); err != nil {
		return "", fmt.Errorf("error writing %s: %w", overlayPath, err)
	}

	bin := filepath.Join(dir, "provider-pprof")

	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	cmd := []string{"go", "-C", repo, "build", "-overlay", overlayPath, "-o", bin, "./provider/cmd/provider"}
	if _, err = proc.Run(bctx, cmd...); err != nil {
		return "", fmt.Errorf("error building the profiling provider: %w", err)
	}

	return bin, nil
}

// Capture fetches a CPU profile of d from the pprof server at addr into path.
func Capture(ctx context.Context, addr string, d time.Duration, path string) error {
	return CaptureWith(ctx, http.DefaultClient, addr, d, path)
}

// CaptureWith is Capture through client (one that dials into another network
// namespace, say).
func CaptureWith(ctx context.Context, client *http.Client, addr string, d time.Duration, path string) error {
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()

	url := "http://" + addr + "/debug/pprof/profile?seconds=" + strconv.Itoa(int(d.Seconds()))

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("error building the profile request: %w", err)
	}

	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("error fetching the profile: %w", err)
	}
	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("error fetching the profile: %s", resp.Status)
	}

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("error creating %s: %w", path, err)
	}

	if _, err = io.Copy(f, resp.Body); err != nil {
		f.Close()

		return fmt.Errorf("error writing %s: %w", path, err)
	}

	if err = f.Close(); err != nil {
		return fmt.Errorf("error closing %s: %w", path, err)
	}

	return nil
}

// Top returns go tool pprof's -top -cum listing of the profile, n lines.
func Top(ctx context.Context, bin, prof string, n int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	out, err := proc.Run(ctx, "go", "tool", "pprof", "-top", "-cum", "-nodecount="+strconv.Itoa(n), bin, prof)
	if err != nil {
		return "", fmt.Errorf("error summarising the profile: %w", err)
	}

	return out, nil
}
