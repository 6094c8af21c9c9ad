package stormbench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/pin/tftp/v3"
)

// ClientCommand is the subcommand of the bench binary (and of the lab test binary) that
// runs the storm's machines; it runs inside the client namespace.
const ClientCommand = "storm-client"

// Phases of one machine's boot, in order.
const (
	PhaseFirmwareDHCP = iota
	PhaseTFTP
	PhaseIPXEDHCP
	PhaseScript
	PhaseAssets
	phases
)

// PhaseNames name the phases in reports.
var PhaseNames = [phases]string{"firmware DHCP", "TFTP iPXE", "iPXE DHCP", "boot script", "kernel+initramfs"}

// MachineResult is one machine's boot.
type MachineResult struct {
	Index int `json:"i"`
	// Start and End are offsets from the storm's start.
	Start time.Duration         `json:"s"`
	End   time.Duration         `json:"e"`
	Phase [phases]time.Duration `json:"p"`
	// Retrans counts DHCP messages sent again for want of an answer.
	Retrans int `json:"r,omitempty"`
	// NoSite, NoProxy count DISCOVERs sent again for want of the site's, the proxy's
	// offer.
	NoSite  int `json:"ns,omitempty"`
	NoProxy int `json:"np,omitempty"`
	// ProxyACKs counts answers of the proxy's boot server port (iPXE asks it once).
	ProxyACKs int    `json:"pa,omitempty"`
	TFTPBytes int64  `json:"tb"`
	HTTPBytes int64  `json:"hb"`
	Err       string `json:"err,omitempty"`
}

// ClientResult is what the client prints: every machine's result.
type ClientResult struct {
	Machines []MachineResult `json:"machines"`
	Took     time.Duration   `json:"took"`
}

// clientConfig is the client's flags.
type clientConfig struct {
	Machines  int
	Iface     string
	Timeout   time.Duration
	Spread    time.Duration
	BlockSize int
	// FirmwareWait, IPXEWait are the first DHCP waits (doubled per retry).
	FirmwareWait, IPXEWait time.Duration
	Tries                  int
}

// ClientMain runs the storm client: every machine boots at once (within -spread) and
// the results go to stdout as JSON. It runs in the client namespace.
func ClientMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(ClientCommand, flag.ContinueOnError)

	var cfg clientConfig

	fs.IntVar(&cfg.Machines, "machines", 1000, "simulated machines")
	fs.StringVar(&cfg.Iface, "iface", "", "interface of the segment the DHCP servers are on")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "time one machine has to boot")
	fs.DurationVar(&cfg.Spread, "spread", 0, "machines power on at random times within this")
	fs.IntVar(&cfg.BlockSize, "blksize", 1468, "TFTP block size asked for")
	fs.DurationVar(&cfg.FirmwareWait, "firmware-wait", 4*time.Second, "PXE firmware's first DHCP wait (doubles per retry, as the PXE spec's 4, 8, 16, 32 s)")
	fs.DurationVar(&cfg.IPXEWait, "ipxe-wait", time.Second, "iPXE's first DHCP wait (doubles per retry)")
	fs.IntVar(&cfg.Tries, "tries", 4, "DHCP sends per step")

	if err := fs.Parse(args); err != nil {
		return err
	}

	if cfg.Machines <= 0 || cfg.Machines >= 1<<24 || cfg.Iface == "" {
		return errors.New("want 0 < -machines < 2^24 and an -iface")
	}

	res, err := runClient(ctx, cfg)
	if err != nil {
		return err
	}

	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("error encoding the result: %w", err)
	}

	_, err = fmt.Printf("%s\n", b)

	return err
}

func runClient(ctx context.Context, cfg clientConfig) (*ClientResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	dc, err := listenDHCP(ctx, cfg.Iface)
	if err != nil {
		return nil, err
	}

	salt := rand.Uint32() & 0x1f //nolint:gosec // tells runs apart, no secret

	res := &ClientResult{Machines: make([]MachineResult, cfg.Machines)}
	start := time.Now()

	var wg sync.WaitGroup

	for i := range cfg.Machines {
		var delay time.Duration
		if cfg.Spread > 0 {
			delay = rand.N(cfg.Spread) //nolint:gosec // power-on jitter, no secret
		}

		wg.Go(func() {
			res.Machines[i] = bootMachine(ctx, cfg, dc, newMachine(i, salt), start, delay)
		})
	}

	wg.Wait()

	res.Took = time.Since(start)

	return res, nil
}

// bootMachine runs one machine's boot from power-on to the agent's initramfs in memory.
func bootMachine(ctx context.Context, cfg clientConfig, dc *dhcpConn, m machine, start time.Time, delay time.Duration) MachineResult {
	r := MachineResult{Index: m.Index}

	select {
	case <-time.After(delay):
	case <-ctx.Done():
		r.Err = "interrupted before power-on"

		return r
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	r.Start = time.Since(start)

	err := func() error {
		t := time.Now()

		fw, err := dc.exchange(ctx, m, false, cfg.FirmwareWait, cfg.Tries)
		r.Retrans += fw.Retrans
		r.NoSite += fw.NoSite
		r.NoProxy += fw.NoProxy

		if err != nil {
			return fmt.Errorf("firmware DHCP: %w", err)
		}

		r.Phase[PhaseFirmwareDHCP] = time.Since(t)
		t = time.Now()

		if r.TFTPBytes, err = fetchTFTP(fw.Server, fw.File, cfg.BlockSize); err != nil {
			return fmt.Errorf("TFTP %s from %s: %w", fw.File, fw.Server, err)
		}

		r.Phase[PhaseTFTP] = time.Since(t)
		t = time.Now()

		ipxe, err := dc.exchange(ctx, m, true, cfg.IPXEWait, cfg.Tries+2)
		r.Retrans += ipxe.Retrans
		r.NoSite += ipxe.NoSite
		r.NoProxy += ipxe.NoProxy

		if ipxe.ProxyACK {
			r.ProxyACKs++
		}

		if err != nil {
			return fmt.Errorf("iPXE DHCP: %w", err)
		}

		r.Phase[PhaseIPXEDHCP] = time.Since(t)

		return runScripts(ctx, m, ipxe.File, &r)
	}()
	if err != nil {
		r.Err = err.Error()
	}

	r.End = time.Since(start)

	return r
}

// fetchTFTP downloads file as PXE firmware does (block size negotiated, octet mode)
// and returns its size.
func fetchTFTP(server net.IP, file string, blksize int) (int64, error) {
	c, err := tftp.NewClient(net.JoinHostPort(server.String(), "69"))
	if err != nil {
		return 0, fmt.Errorf("error creating the TFTP client: %w", err)
	}

	c.SetBlockSize(blksize)
	c.RequestTSize(true)
	c.SetTimeout(2 * time.Second)
	c.SetRetries(5)

	wt, err := c.Receive(file, "octet")
	if err != nil {
		return 0, fmt.Errorf("error requesting it: %w", err)
	}

	n, err := wt.WriteTo(io.Discard)
	if err != nil {
		return n, fmt.Errorf("error receiving it: %w", err)
	}

	if it, ok := wt.(tftp.IncomingTransfer); ok {
		if size, ok := it.Size(); ok && size != n {
			return n, fmt.Errorf("received %d bytes of %d", n, size)
		}
	}

	if n == 0 {
		return 0, errors.New("empty file")
	}

	return n, nil
}

var ipxeVar = regexp.MustCompile(`\$\{([^}]*)\}`)

// runScripts fetches the boot script at url and does what iPXE does with it: follow
// chains, fetch the kernel and initrd it names, until "boot".
func runScripts(ctx context.Context, m machine, url string, r *MachineResult) error {
	// One connection pool per machine: machines do not share connections.
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second}
	defer tr.CloseIdleConnections()

	client := &http.Client{Transport: tr}
	vars := m.ipxeVars()

	var kernel, initrd bool

	for range 4 {
		t := time.Now()

		body, err := get(ctx, client, url, nil)
		if err != nil {
			return fmt.Errorf("boot script: %w", err)
		}

		r.Phase[PhaseScript] += time.Since(t)

		next := ""

		for line := range strings.SplitSeq(body, "\n") {
			cmd, arg := scriptCommand(line)

			switch cmd {
			case "chain":
				next = ipxeVar.ReplaceAllStringFunc(arg, func(v string) string { return vars[v[2:len(v)-1]] })
			case "kernel", "initrd":
				t := time.Now()

				if _, err := get(ctx, client, arg, &r.HTTPBytes); err != nil {
					return fmt.Errorf("%s: %w", cmd, err)
				}

				r.Phase[PhaseAssets] += time.Since(t)
				kernel, initrd = kernel || cmd == "kernel", initrd || cmd == "initrd"
			case "boot":
				if !kernel || !initrd {
					return errors.New("boot without a kernel and an initrd")
				}

				return nil
			case "exit", "sanboot":
				return fmt.Errorf("the script sent the machine to its disk (%s)", cmd)
			}

			if next != "" {
				break
			}
		}

		if next == "" {
			return fmt.Errorf("script %s neither chains nor boots", url)
		}

		url = next
	}

	return errors.New("more than 4 chained scripts")
}

// scriptCommand splits an iPXE script line into its command and first argument (the
// URL of chain, kernel and initrd), options and "|| fallback" left out.
func scriptCommand(line string) (cmd, arg string) {
	line, _, _ = strings.Cut(line, "||")

	fields := strings.Fields(line)
	if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
		return "", ""
	}

	cmd = fields[0]

	for _, f := range fields[1:] {
		if !strings.HasPrefix(f, "--") {
			return cmd, f
		}
	}

	return cmd, ""
}

// get fetches url; with counted set the body is drained and counted, else returned.
func get(ctx context.Context, client *http.Client, url string, counted *int64) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", fmt.Errorf("error building the request for %s: %w", url, err)
	}

	req.Header.Set("User-Agent", "iPXE/1.21.1+")

	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("error fetching %s: %w", url, err)
	}

	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s answered %s", url, resp.Status)
	}

	if counted == nil {
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if err != nil {
			return "", fmt.Errorf("error reading %s: %w", url, err)
		}

		return string(b), nil
	}

	// Large reads, as iPXE's: io.Discard's own ReadFrom would read 8 KiB at a time.
	n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, resp.Body, make([]byte, 64<<10))
	*counted += n

	if err != nil {
		return "", fmt.Errorf("error reading %s after %d bytes: %w", url, n, err)
	}

	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return "", fmt.Errorf("%s: %d bytes of %d", url, n, resp.ContentLength)
	}

	return "", nil
}
