package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/internal/uki"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
)

// ukiOSRelease names the image in firmware boot menus.
const ukiOSRelease = "ID=anvil\nNAME=\"Anvil metal agent\"\n"

// handleUKI serves a UEFI HTTP boot client (arm64: no iPXE) the Unified Kernel Image its
// boot decision calls for: the agent, with this machine's command line, or 404 to send it
// to its disk. The path names the machine as a boot-script query does
// (pxe.UKIPath); the image is laid out over the asset files, not copied.
func (s *Server) handleUKI(w http.ResponseWriter, r *http.Request) {
	req, m, ok := s.bootRequest(w, r, url.Values{
		"uuid": {r.PathValue("uuid")}, "mac": {r.PathValue("mac")}, "arch": {r.PathValue("arch")}, "platform": {"efi"},
	}.Encode())
	if !ok {
		return
	}

	m, decision, ok := s.decide(w, r, m)
	if !ok {
		return
	}

	now := time.Now()
	u := s.opts.Scripts.RenderUKI(r.Context(), req, decision, token.Claims{Issued: now})

	if u.Status != http.StatusOK {
		if u.Served != "" {
			s.metrics.scriptsByKind[u.Served].Inc()
			s.recordBoot(r, req, m, lifecycle.BootDecision{Boot: u.Served, Reason: decision.Reason}, now, time.Time{})
		} else {
			s.opts.Logger.Warn("cannot boot a UKI client yet", zap.String("machine", req.MachineID), zap.String("reason", u.Message))
		}

		http.Error(w, u.Message, u.Status)

		return
	}

	body, closeFiles, err := openUKI(u)
	if err != nil {
		s.opts.Logger.Error("error building a UKI", zap.String("machine", req.MachineID), zap.Error(err))
		http.Error(w, "the provider cannot build the boot image", http.StatusInternalServerError)

		return
	}
	defer closeFiles()

	s.metrics.scriptsByKind[u.Served].Inc()
	// Recorded as served: without a cache a machine allocated to Talos boots the agent,
	// which kexecs it.
	s.recordBoot(r, req, m, lifecycle.BootDecision{Boot: u.Served, Reason: decision.Reason}, now, u.AgentToken.Issued)

	if u.Served == lifecycle.BootTalos {
		s.opts.Trace.Mark(req.MachineID, boottrace.PhaseHandoff, req.Firmware, "uki")
	}

	h := w.Header()
	h.Set("Content-Type", "application/efi")
	h.Set("Content-Length", strconv.FormatInt(body.Size(), 10))
	// Each answer carries a new token: no range of one answer belongs with another.
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)

	if r.Method == http.MethodHead {
		return
	}

	_, _ = io.Copy(w, io.NewSectionReader(body, 0, body.Size())) // the client went away: nothing to do
}

// openUKI lays out the image u names over its files; close closes them.
func openUKI(u boot.UKI) (*uki.Image, func(), error) {
	var files []*os.File

	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}

	sections := []uki.Section{uki.BytesSection(uki.SectionOSRel, []byte(ukiOSRelease)), uki.BytesSection(uki.SectionCmdline, []byte(u.Cmdline))}

	for _, part := range []struct{ name, path string }{{uki.SectionLinux, u.Kernel}, {uki.SectionInitrd, u.Initramfs}} {
		f, err := os.Open(part.path)
		if err != nil {
			closeAll()

			return nil, nil, fmt.Errorf("error opening %s: %w", part.name, err)
		}

		files = append(files, f)

		st, err := f.Stat()
		if err != nil {
			closeAll()

			return nil, nil, fmt.Errorf("error reading %s: %w", part.name, err)
		}

		sections = append(sections, uki.Section{Name: part.name, Data: f, Size: st.Size()})
	}

	im, err := uki.New(u.Stub, sections...)
	if err != nil {
		closeAll()

		return nil, nil, err
	}

	return im, closeAll, nil
}
