package httpapi_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siderolabs/siderolink/api/events"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/anvil-metal/anvil/internal/fuzzcorpus"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/httpapi"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

const fuzzConfig = "version: v1alpha1 # fuzz secret config\n"

// newFuzzFixture is a server over a real store with m1 allocated (a1, with a config) and
// booting Talos from 127.0.0.1, and m2 an agent-booting machine. Its logger is quiet:
// fuzzing runs the handlers millions of times.
func newFuzzFixture(f *testing.F) *fixture {
	f.Helper()

	fx := newFixture(f)
	fx.server = httpapi.New(httpapi.Options{
		State: fx.store, View: fx.view, Scripts: fx.scripts, Observations: fx.obs, Installs: fx.rec,
		Registry: prometheus.NewRegistry(), Logger: zap.NewNop(),
	})

	fx.machine(f, m1, "127.0.0.1", lifecycle.BootTalos, &resources.MachineIntentSpec{
		Acceptance: resources.AcceptanceAccepted, Allocation: &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: s1, Config: fuzzConfig},
	}, nil)
	fx.machine(f, m2, "192.0.2.2", lifecycle.BootAgent, &resources.MachineIntentSpec{Acceptance: resources.AcceptanceAccepted}, nil)

	return fx
}

func (f *fixture) serve(target string) (*httptest.ResponseRecorder, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://10.77.0.1:50042"+target, nil)
	if err != nil {
		return nil, err
	}

	req.RemoteAddr = "192.0.2.9:4242"
	rec := httptest.NewRecorder()
	f.server.Handler().ServeHTTP(rec, req)

	// Observations are dropped when the channel is full; drain so they keep flowing.
	for len(f.obs) > 0 {
		<-f.obs
	}

	return rec, nil
}

// FuzzBootScriptQuery sends iPXE's boot-script request with any query through the
// server's routes: a bad query is a 400 naming the reason, never a 500, and a script is
// an iPXE script for the machine the query named.
func FuzzBootScriptQuery(f *testing.F) {
	fuzzcorpus.Seed(f,
		fuzzcorpus.E("bios-i386", "uuid=4C4C4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=i386&platform=pcbios"),
		fuzzcorpus.E("uefi-x86_64", "uuid="+m1+"&mac=52:54:00:12:34:56&arch=x86_64&platform=efi"),
		fuzzcorpus.E("agent-machine", "uuid="+m2+"&mac=52-54-00-00-00-02&arch=x86_64&platform=efi"),
		fuzzcorpus.E("arm64", "uuid=4c4c4544-0000-1000-8000-000000000003&mac=52-54-00-12-34-57&arch=arm64&platform=efi"),
		fuzzcorpus.E("null-uuid", "uuid=00000000-0000-0000-0000-000000000000&mac=52-54-00-12-34-56&arch=x86_64&platform=efi"),
		fuzzcorpus.E("ff-uuid", "uuid=FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF&mac=52-54-00-12-34-56&arch=x86_64&platform=efi"),
		fuzzcorpus.E("unexpanded", "uuid=${uuid}&mac=${net0/mac:hexhyp}&arch=${buildarch}&platform=${platform}"),
		fuzzcorpus.E("duplicate-keys", "uuid="+m1+"&uuid="+m2+"&mac=52-54-00-12-34-56&arch=x86_64&platform=efi&platform=pcbios"),
		fuzzcorpus.E("injection", "uuid="+m1+"&mac=52-54-00-12-34-56&arch=x86_64%0Ashell&platform=efi"),
		fuzzcorpus.E("bad-escape", "uuid=%zz&&&="),
		fuzzcorpus.E("semicolon", "uuid="+m1+";mac=52-54-00-12-34-56"),
		fuzzcorpus.E("oversize", "uuid="+m1+"&pad="+strings.Repeat("x", boot.MaxQueryLength)),
		fuzzcorpus.E("empty", ""),
	)

	fx := newFuzzFixture(f)

	f.Fuzz(func(t *testing.T, query string) {
		rec, err := fx.serve("/ipxe/boot.ipxe?" + query)
		if err != nil {
			return // not a request line net/http would read
		}

		body := rec.Body.String()

		switch rec.Code {
		case http.StatusOK:
			if _, err := boot.ParseQuery(query); err != nil {
				t.Fatalf("served a script to a query the parser refuses (%v)", err)
			}

			// The query's fields reach the script only as validated: no control bytes.
			if !strings.HasPrefix(body, "#!ipxe\n") || strings.ContainsAny(body, "\r\x00") {
				t.Fatalf("not a clean iPXE script: %.200q", body)
			}
		case http.StatusBadRequest:
			if !strings.Contains(body, boot.ErrBadRequest.Error()) {
				t.Fatalf("400 without the reason: %q", body)
			}
		default:
			t.Fatalf("status %d: %.200q", rec.Code, body)
		}
	})
}

// FuzzMetadata requests a machine's configuration with any path and token: only the
// machine's metadata token for its current allocation is served it, every other request
// is refused without the config, and no response, of any status, echoes the token.
func FuzzMetadata(f *testing.F) {
	key := token.Sign([]byte("not the key"), boot.MetadataClaims(m1, "a1"))

	fuzzcorpus.Seed(f,
		fuzzcorpus.E("own-token", m1, "", "a1", byte(1)),
		fuzzcorpus.E("earlier-allocation", m1, "", "a0", byte(1)),
		fuzzcorpus.E("other-machine", m2, "", "a1", byte(1)),
		fuzzcorpus.E("agent-token", m1, "", "", byte(2)),
		fuzzcorpus.E("forged-key", m1, key, "", byte(0)),
		fuzzcorpus.E("no-token", m1, "", "", byte(0)),
		fuzzcorpus.E("garbage", m1, "v1.!!!.???", "", byte(0)),
		fuzzcorpus.E("traversal", "../../etc/passwd", "", "a1", byte(1)),
		fuzzcorpus.E("encoded-slash", m1+"/../"+m2, "", "a1", byte(1)),
		fuzzcorpus.E("oversize", m1, strings.Repeat("v1.", 400), "", byte(0)),
	)

	fx := newFuzzFixture(f)

	f.Fuzz(func(t *testing.T, id, raw, binding string, mode byte) {
		tok := raw

		switch mode % 3 {
		case 1:
			tok = token.Sign(fx.scripts.TokenKey, boot.MetadataClaims(id, binding))
		case 2:
			tok = token.Sign(fx.scripts.TokenKey, token.Claims{Kind: token.KindAgent, MachineID: id, Issued: time.Now()})
		}

		target := "/metadata/" + url.PathEscape(id)

		rec, err := fx.serve(target + "?token=" + url.QueryEscape(tok))
		if err != nil {
			return
		}

		body := rec.Body.String()
		own := mode%3 == 1 && id == m1 && binding == "a1"

		switch {
		case own && (rec.Code != http.StatusOK || body != fuzzConfig):
			t.Fatalf("own token refused: %d %q", rec.Code, body)
		case !own && rec.Code == http.StatusOK:
			t.Fatalf("served %q to id %q token %q", body, id, tok)
		case !own && strings.Contains(body, "secret config"):
			t.Fatalf("config in a refusal: %q", body)
		case len(tok) > 8 && echoes(rec, tok) && !fx.saysAnyway(target, tok):
			// Of any status: a redirect's Location is as much an echo as a refusal's body.
			t.Fatalf("token echoed: %d %q %v", rec.Code, body, rec.Header())
		case rec.Code/100 == 3:
			// The mux's redirect of an unclean path (/metadata/.) is refused before it.
			t.Fatalf("redirected: %d %v", rec.Code, rec.Header())
		case rec.Code >= 500:
			t.Fatalf("status %d: %q", rec.Code, body)
		}
	})
}

// echoes reports whether the response carries tok, as sent or query-escaped, in its
// body or in any header (a redirect's Location).
func echoes(rec *httptest.ResponseRecorder, tok string) bool {
	for _, form := range []string{tok, url.QueryEscape(tok)} {
		if strings.Contains(rec.Body.String(), form) {
			return true
		}

		for _, values := range rec.Header() {
			for _, v := range values {
				if strings.Contains(v, form) {
					return true
				}
			}
		}
	}

	return false
}

// saysAnyway reports whether the answer to target without a token carries tok too: a
// "token" such as "invalid token" is then the server's own words, not an echo.
func (f *fixture) saysAnyway(target, tok string) bool {
	rec, err := f.serve(target + "?token=")

	return err == nil && echoes(rec, tok)
}

// rawCodec sends the fuzzer's bytes as the request message, so the server's own gRPC
// decoding reads them as it would read Talos'.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}

	return proto.Marshal(v.(proto.Message))
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	return proto.Unmarshal(data, v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

func eventBytes(f *testing.F, typeURL string, ev proto.Message) []byte {
	f.Helper()

	var data []byte

	if ev != nil {
		var err error
		if data, err = proto.Marshal(ev); err != nil {
			f.Fatal(err)
		}
	}

	b, err := proto.Marshal(&events.EventRequest{Id: "1", Data: &anypb.Any{TypeUrl: typeURL, Value: data}})
	if err != nil {
		f.Fatal(err)
	}

	return b
}

// FuzzEventSink sends any bytes as a Talos event to the event sink over plaintext HTTP/2
// gRPC: an install is recorded only for the install sequence's kexec phase starting (a
// phase event) or its end in a reboot (a sequence NOOP with a FATAL unix.Reboot), from
// the allocated machine's address, and everything else is answered, not crashed on.
func FuzzEventSink(f *testing.F) {
	const (
		seq   = "talos/runtime/machine.SequenceEvent"
		phase = "talos/runtime/machine.PhaseEvent"
	)

	rebooted := eventBytes(f, seq, &machine.SequenceEvent{
		Sequence: "install", Action: machine.SequenceEvent_NOOP,
		Error: &common.Error{Code: common.Code_FATAL, Message: "sequence failed: error running phase 8 in install sequence: task 1/1: failed, unix.Reboot(45584543)"},
	})

	fuzzcorpus.Seed(f,
		fuzzcorpus.E("install-stop", eventBytes(f, seq, &machine.SequenceEvent{Sequence: "install", Action: machine.SequenceEvent_STOP})),
		fuzzcorpus.E("install-start", eventBytes(f, seq, &machine.SequenceEvent{Sequence: "install", Action: machine.SequenceEvent_START})),
		fuzzcorpus.E("install-failed", eventBytes(f, seq, &machine.SequenceEvent{Sequence: "install", Action: machine.SequenceEvent_STOP, Error: &common.Error{Message: "disk not found"}})),
		fuzzcorpus.E("install-rebooted", rebooted),
		fuzzcorpus.E("install-kexec", eventBytes(f, phase, &machine.PhaseEvent{Phase: "kexec", Action: machine.PhaseEvent_START})),
		fuzzcorpus.E("boot-stop", eventBytes(f, seq, &machine.SequenceEvent{Sequence: "boot", Action: machine.SequenceEvent_STOP})),
		fuzzcorpus.E("phase-event", eventBytes(f, phase, &machine.PhaseEvent{Phase: "install", Action: machine.PhaseEvent_STOP})),
		fuzzcorpus.E("wrong-type", eventBytes(f, seq, &machine.PhaseEvent{Phase: "install"})),
		fuzzcorpus.E("no-data", []byte{0x0a, 0x01, '1'}),
		fuzzcorpus.E("truncated", rebooted[:len(rebooted)-3]),
		fuzzcorpus.E("empty", []byte{}),
	)

	fx := newFuzzFixture(f)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- fx.server.Serve(ctx, lis) }()

	f.Cleanup(func() {
		cancel()
		<-done //nolint:errcheck // the server's end, not its error, is waited for
	})

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		f.Fatal(err)
	}

	f.Cleanup(func() { conn.Close() })

	var mu sync.Mutex // the recorder's count is read before and after each call

	f.Fuzz(func(t *testing.T, msg []byte) {
		mu.Lock()
		defer mu.Unlock()

		callCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		before := fx.rec.count()

		var resp events.EventResponse

		err := conn.Invoke(callCtx, events.EventSinkService_Publish_FullMethodName, &msg, &resp)

		var req events.EventRequest

		decodes := proto.Unmarshal(msg, &req) == nil

		if err != nil {
			switch grpcstatus.Code(err) {
			case codes.InvalidArgument, codes.PermissionDenied, codes.Internal:
				// Internal: gRPC's own refusal of bytes that are not a message.
			default:
				t.Fatalf("event answered %v", err)
			}
		}

		if fx.rec.count() == before {
			return
		}

		if !decodes || err != nil || !installEvent(req.GetData()) {
			t.Fatalf("install recorded from %x (%v)", msg, err)
		}
	})
}

// installEvent says whether data is one of the two events that may mark an install: the
// kexec phase's start (of the install sequence an earlier input started), or the install
// sequence's FATAL unix.Reboot.
func installEvent(data *anypb.Any) bool {
	var ph machine.PhaseEvent
	if data.UnmarshalTo(&ph) == nil {
		return ph.GetPhase() == "kexec" && ph.GetAction() == machine.PhaseEvent_START
	}

	var ev machine.SequenceEvent
	if data.UnmarshalTo(&ev) != nil {
		return false
	}

	return ev.GetSequence() == "install" && ev.GetAction() == machine.SequenceEvent_NOOP &&
		ev.GetError().GetCode() == common.Code_FATAL && strings.Contains(ev.GetError().GetMessage(), "unix.Reboot")
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()

	return len(r.records)
}
