package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/siderolink/api/events"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/anvil-metal/anvil/hack/internal/talosrecord"
)

// The stand-in is held to real Talos: hack/cmd/talos-record recorded what Talos v1.13.9
// answered and sent, in QEMU, to the requests of hack/internal/talosrecord's probes; these
// tests make the same requests to the stand-in, in process (its maintenance API over
// loopback, its events to the same kind of sink), and compare, field by field, what the
// stand-in emulates. What it deliberately does not is listed with the reason, in
// notCompared and in the events' filter.

// recordingFile is real Talos' recording (talosrecord.DefaultFile, from this package).
const recordingFile = "testdata/real-talos.json"

// The stand-in's schematic: its ID and document become the recording's placeholders.
const (
	testSchematic = "c07ac9f8cb482536decfcb20d56c2998e22c93ac7bcf4fe243dc72d0fbcc9f22"
	testManifest  = "customization:\n    extraKernelArgs:\n        - console=ttyS0\n"
)

// compared are, per call name, the fields of the answer the stand-in follows (paths in
// the normalised answer); the code and the error message are always compared.
var compared = map[string][]string{
	talosrecord.CallVersion: {
		"messages.0.version.tag", "messages.0.version.os", "messages.0.version.arch",
		"messages.0.platform", "messages.0.features",
	},
	talosrecord.CallMachineStatus:      {"stage", "ready", "unmetConditions"},
	talosrecord.CallSchematicExtension: {""},
	talosrecord.CallApplyEmpty:         nil,
	talosrecord.CallApplyNotYAML:       nil,
	talosrecord.CallApplyNoInstallDisk: nil,
	talosrecord.CallApplySinkAuto:      applyFields,
	talosrecord.CallApplySinkNoReboot:  applyFields,
	talosrecord.CallApplySinkReboot:    applyFields,
	talosrecord.CallApplySinkStaged:    applyFields,
	talosrecord.CallApplyMachine:       applyFields,
	talosrecord.CallApplyMachineNoRbt:  applyFields,
	talosrecord.CallApplyMachineStaged: applyFields,
	talosrecord.CallMetaDeleteStateEnc: nil,
	talosrecord.CallMetaDeleteUserGone: nil,
	talosrecord.CallReadBootID:         {""},
	talosrecord.CallReset:              {"messages.0.actorId"},
}

// applyFields are an ApplyConfiguration answer's: how the config applies, Talos' words
// for it, its warnings.
var applyFields = []string{"messages.#", "messages.0.mode", "messages.0.modeDetails", "messages.0.warnings"}

// notYAMLMessage is why a YAML parse error's words are not compared (its code is).
const notYAMLMessage = "the stand-in loads configs with the provider's Talos machinery (v1.14's, go-yaml v4), whose parser words a syntax error otherwise than v1.13.9's; Omni shows the message, it does not read it"

// factoryURL is the image factory's URL in the schematic extension's author: the
// recorder's factory and the stand-in's listen on ports of their own.
var factoryURL = regexp.MustCompile(`\(https?://[^)]*\)`)

// notCompared are the calls, or fields, of a step the stand-in does not follow, and why.
var notCompared = map[string]map[string]string{
	talosrecord.StepMaintenance: {
		talosrecord.CallApplyNotYAML + ".message": notYAMLMessage,
		talosrecord.CallMetaWriteUser:             "recorded as a Reader (no client certificate, from outside SideroLink), refused; Omni calls it over SideroLink as Admin, and only for a machine that joined without a node unique token, which the stand-in never is",
		talosrecord.CallMetaDeleteStateEnc:        "recorded as a Reader, refused; Omni deletes the key only before it resets a running machine",
		talosrecord.CallReadBootID:                "recorded as a Reader, refused; Omni reads it over SideroLink as Admin",
		talosrecord.CallReset:                     "recorded as a Reader, refused; Omni does not reset a machine in maintenance (Version tells it there is nothing to reset)",
	},
	talosrecord.StepInstalled: {
		talosrecord.CallApplyNotYAML + ".message":          notYAMLMessage,
		talosrecord.CallMachineStatus + ".stage":           "the lab's real Talos stays booting: its boot sequence waits 70 minutes for etcd and the kubelet, whose images the lab has not; the stand-in runs nothing and is running at once, as Talos is in a cluster that has its images",
		talosrecord.CallMachineStatus + ".ready":           "the same: real Talos is not ready while its services are not up",
		talosrecord.CallMachineStatus + ".unmetConditions": "the same",
		talosrecord.CallMetaWriteUser:                      "not emulated: the stand-in's META is its saved node unique token; nobody writes META on a running machine of Omni's",
		talosrecord.CallMetaDeleteUser:                     "follows from MetaWrite's not being emulated: the stand-in never has the key",
	},
}

// TestStandinAPIFollowsRealTalos: the stand-in's Talos API, in maintenance, through the
// install and installed, answers the recorder's requests as real Talos did.
func TestStandinAPIFollowsRealTalos(t *testing.T) {
	t.Parallel()

	rec, err := talosrecord.Load(recordingFile)
	require.NoError(t, err)

	r := newRig(t, rec.TalosVersion)
	cfgs := r.configs(t)
	ctx := t.Context()

	c := r.serve(t, nil)

	compareCalls(t, rec, talosrecord.StepMaintenance, talosrecord.Maintenance(ctx, c, cfgs, testSchematic, testManifest))
	compareCalls(t, rec, talosrecord.StepInstall, []talosrecord.Call{talosrecord.Install(ctx, c, cfgs)})

	r.waitFor(t, "omni rebooting")
	r.bootInstalled(t)

	c = r.serve(t, cfgs.ClientTLS)

	compareCalls(t, rec, talosrecord.StepInstalled, talosrecord.Installed(ctx, c, cfgs, testSchematic, testManifest))
	compareCalls(t, rec, talosrecord.StepReset, []talosrecord.Call{talosrecord.Reset(ctx, c)})
}

// compareCalls compares the stand-in's answers with the step's recorded ones, call by
// call, in the order made.
func compareCalls(t *testing.T, rec *talosrecord.Recording, step string, got []talosrecord.Call) {
	t.Helper()

	recorded := rec.Step(step)
	require.NotNil(t, recorded, "the recording has no step %q", step)
	require.Len(t, got, len(recorded.Calls), "step %q: the probes and the recording do not match: record again", step)

	for i, want := range recorded.Calls {
		g := got[i]
		require.Equal(t, want.Name, g.Name, "step %q: the probes and the recording do not match: record again", step)

		if why, ok := notCompared[step][want.Name]; ok {
			t.Logf("%s / %s: not compared: %s", step, want.Name, why)

			continue
		}

		fields, ok := compared[want.Name]
		if !assert.True(t, ok, "%s / %s: neither compared nor listed as not compared", step, want.Name) {
			continue
		}

		what := step + " / " + want.Name
		assert.Equal(t, want.Code, g.Code, "%s: code (real: %s)", what, want.Message)

		if why, ok := notCompared[step][want.Name+".message"]; ok {
			t.Logf("%s / message: not compared: %s", what, why)
		} else {
			assert.Equal(t, want.Message, g.Message, "%s: message", what)
		}

		if want.Code != "OK" {
			continue
		}

		for _, f := range fields {
			if why, ok := notCompared[step][want.Name+"."+f]; ok {
				t.Logf("%s / %s: not compared: %s", what, f, why)

				continue
			}

			assert.Equal(t, normalise(t, want.Response, f), normalise(t, g.Response, f), "%s: %q", what, f)
		}
	}
}

// normalise is field's value as the recording holds it (JSON's numbers, the factory's
// URL as a placeholder), so that the stand-in's answer, made in process, compares.
func normalise(t *testing.T, v any, path string) any {
	t.Helper()

	b, err := json.Marshal(field(v, path))
	require.NoError(t, err)

	b = factoryURL.ReplaceAll(b, []byte("(<factory>)"))

	var out any
	require.NoError(t, json.Unmarshal(b, &out))

	return out
}

// field is the value at path in a normalised answer: "" the whole, "x.#" the length of
// the list at x.
func field(v any, path string) any {
	if path == "" {
		return v
	}

	if list, ok := strings.CutSuffix(path, ".#"); ok {
		l, _ := talosrecord.Get(v, list).([]any)

		return len(l)
	}

	return talosrecord.Get(v, path)
}

// rig is the stand-in beside Omni, in process: its saved state on a file for a disk, the
// factory's disk image from a test server, its events to a sink.
type rig struct {
	t        *omniTalos
	out      *syncBuffer
	sink     *talosrecord.Sink
	sinkAddr string
}

func newRig(t *testing.T, version string) *rig {
	t.Helper()

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	sink := talosrecord.NewSink(talosrecord.StepMaintenanceBoot)

	go sink.Serve(ctx, lis) //nolint:errcheck // ends with the test

	image := bytes.Repeat([]byte{0xaa}, 64<<10)
	factory := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/image/"+testSchematic+"/"+version+"/metal-amd64.raw" {
			http.NotFound(w, req)

			return
		}

		_, _ = w.Write(image)
	}))
	t.Cleanup(factory.Close)

	dev := filepath.Join(t.TempDir(), "disk")
	require.NoError(t, os.WriteFile(dev, nil, 0o600))
	require.NoError(t, os.Truncate(dev, 4<<20))

	out := &syncBuffer{}

	return &rig{
		t: &omniTalos{
			logger: zap.NewNop(), out: out,
			uuid: "4c4c4544-0000-1000-8000-0000000000e5", disk: disk{dev: dev, size: 4 << 20},
			join:  joinArgs{API: "grpc://10.77.0.3:8090?jointoken=x", EventsSink: lis.Addr().String()},
			token: "unique-token", schematic: testSchematic, manifest: testManifest, version: version,
			factory: factory.URL,
		},
		out: out, sink: sink, sinkAddr: lis.Addr().String(),
	}
}

// configs are the recorder's configs for the stand-in.
func (r *rig) configs(t *testing.T) *talosrecord.Configs {
	t.Helper()

	cfgs, err := talosrecord.MakeConfigs(talosrecord.Params{Version: r.t.version, Schematic: testSchematic, Registry: "127.0.0.1:5000", Sink: r.sinkAddr})
	require.NoError(t, err)

	return cfgs
}

// serve serves the stand-in's API as it is now and returns a machinery client of it:
// with no client certificate (nil, maintenance) or with tlsConf's.
func (r *rig) serve(t *testing.T, tlsConf *tls.Config) *client.Client {
	t.Helper()

	ctx, cancel := context.WithCancel(context.Background())

	talos, err := r.t.talos()
	require.NoError(t, err)

	srv, err := newAPI(ctx, talos, zap.NewNop())
	require.NoError(t, err)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	done := make(chan error, 1)

	go func() { done <- srv.Serve(ctx, lis) }()

	if tlsConf == nil {
		tlsConf = &tls.Config{InsecureSkipVerify: true}
	}

	c, err := client.New(ctx, client.WithEndpoints(lis.Addr().String()), client.WithTLSConfig(tlsConf.Clone()))
	require.NoError(t, err)

	t.Cleanup(func() {
		c.Close()
		cancel()
		assert.NoError(t, <-done)
	})

	return c
}

// bootInstalled makes the stand-in what it is booted from its disk: its saved state.
func (r *rig) bootInstalled(t *testing.T) {
	t.Helper()

	s, err := readSaved(r.t.disk)
	require.NoError(t, err)
	require.NotNil(t, s, "the install saved no state")

	old := r.t
	r.t = &omniTalos{
		logger: old.logger, out: old.out, uuid: old.uuid, disk: old.disk, factory: old.factory,
		token: s.UniqueToken, join: s.Join, schematic: s.Schematic, manifest: s.SchematicManifest, version: s.Version, config: s.Config,
	}
}

// waitFor waits for the stand-in to print line.
func (r *rig) waitFor(t *testing.T, line string) {
	t.Helper()

	require.Eventually(t, func() bool { return strings.Contains(r.out.String(), Prefix+" "+line) }, 30*time.Second, 50*time.Millisecond,
		"the stand-in did not print %q: %s", line, r.out.String())
}

// syncBuffer is a buffer the stand-in's goroutines write to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.Write(p) //nolint:wrapcheck // a buffer's
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.String()
}

// extraEvents are events the stand-in sends that the recording lacks, and why.
var extraEvents = map[string]string{
	"sequence install STOP": "real Talos publishes it after the install's reboot phase whether the install worked or not; in the recording its kexec came first, so the sink never got it",
	"sequence install NOOP error FATAL: " + installRebootError: "the same: the install sequence's end in the kexec, Sidero's and Omni's sign of an install (Omni also counts the installed boot's sequence boot START); real Talos sends it on a reset (recorded) and, when it wins the race with the kexec, on an install",
}

// TestStandinEventsFollowRealTalos: the events the stand-in sends its sink as it installs
// and resets are those real Talos sent in the same step, in the same order (real Talos
// sends many more: phases, tasks, services), save extraEvents.
func TestStandinEventsFollowRealTalos(t *testing.T) {
	t.Parallel()

	rec, err := talosrecord.Load(recordingFile)
	require.NoError(t, err)

	// The standalone stand-in's install (sendInstall), from its list.
	var standalone []string

	for _, ev := range installEvents() {
		data, err := anypb.New(ev)
		require.NoError(t, err)

		standalone = append(standalone, talosrecord.Summarize(&events.EventRequest{Data: data}))
	}

	assertSubsequence(t, "standalone install", standalone, recordedEvents(t, rec, talosrecord.StepInstall))

	// The Omni stand-in's, as sent: its install, and a reset of the installed machine.
	r := newRig(t, rec.TalosVersion)
	cfgs := r.configs(t)
	ctx := t.Context()

	c := r.serve(t, nil)

	r.sink.Step(talosrecord.StepInstall)
	talosrecord.Install(ctx, c, cfgs)
	r.waitFor(t, "omni rebooting")
	r.bootInstalled(t)

	c = r.serve(t, cfgs.ClientTLS)

	r.sink.Step(talosrecord.StepReset)

	reset, actor := talosrecord.ResetActor(ctx, c)
	require.Equal(t, "OK", reset.Code, reset.Message)
	require.NoError(t, r.sink.WaitFor(ctx, talosrecord.StepReset, func(s string) bool { return strings.HasPrefix(s, "machine status RESETTING") }))

	for _, step := range []string{talosrecord.StepInstall, talosrecord.StepReset} {
		var got []string

		for _, req := range r.sink.Events(step) {
			got = append(got, eventKey(talosrecord.NormalizeEvent(req, actor)))
		}

		assertSubsequence(t, "Omni "+step, got, recordedEvents(t, rec, step))
	}
}

// recordedEvents are the summaries of the step's recorded events.
func recordedEvents(t *testing.T, rec *talosrecord.Recording, step string) []string {
	t.Helper()

	s := rec.Step(step)
	require.NotNil(t, s, "the recording has no step %q", step)

	out := make([]string, 0, len(s.Events))
	for _, ev := range s.Events {
		out = append(out, eventKey(ev))
	}

	return out
}

// eventKey is an event as compared: its summary and, when it has one, its actor (the
// reset's events name the reset's actor, its status events none).
func eventKey(ev talosrecord.Event) string {
	if ev.Actor == "" {
		return ev.Summary
	}

	return ev.Summary + " (actor: " + ev.Actor + ")"
}

// assertSubsequence asserts that got, less extraEvents, is real's in real's order.
func assertSubsequence(t *testing.T, what string, got, real []string) {
	t.Helper()

	i := 0

	for _, g := range got {
		if why, ok := extraEvents[g]; ok {
			t.Logf("%s: %q not in the recording: %s", what, g, why)

			continue
		}

		for i < len(real) && real[i] != g {
			i++
		}

		if !assert.Less(t, i, len(real), "%s: the stand-in sent %q, which real Talos did not send then (or not in this order); it sent: %q", what, g, got) {
			return
		}

		i++
	}
}
