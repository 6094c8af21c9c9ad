package redfish

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/internal/fuzzcorpus"
	"github.com/anvil-metal/anvil/provider/internal/power"
)

// fuzzDocs are a BMC's documents on the paths Anvil reads and posts to, in a fixed order
// (the fuzzer names one by its index), with sessions.
var fuzzDocs = []struct{ route, body string }{
	{"GET /redfish/v1/", `{"@odata.id":"/redfish/v1/","RedfishVersion":"1.6.0","Systems":{"@odata.id":"/redfish/v1/Systems"},` +
		`"SessionService":{"@odata.id":"/redfish/v1/SessionService"},"Links":{"Sessions":{"@odata.id":"/redfish/v1/SessionService/Sessions"}}}`},
	{"POST /redfish/v1/SessionService/Sessions", `{"@odata.id":"/redfish/v1/SessionService/Sessions/1","Id":"1","UserName":"admin"}`},
	{"GET /redfish/v1/Systems", `{"@odata.id":"/redfish/v1/Systems","Members@odata.count":1,"Members":[{"@odata.id":"/redfish/v1/Systems/1"}]}`},
	{"GET /redfish/v1/Systems/1", `{"@odata.id":"/redfish/v1/Systems/1","Id":"1","UUID":"` + uuidA + `","PowerState":"On",` +
		`"Boot":{"BootSourceOverrideEnabled":"Disabled","BootSourceOverrideTarget":"None","BootSourceOverrideMode":"UEFI",` +
		`"BootSourceOverrideTarget@Redfish.AllowableValues":["None","Pxe","Hdd","Cd"]},` +
		`"Actions":{"#ComputerSystem.Reset":{"target":"/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",` +
		`"ResetType@Redfish.AllowableValues":["On","ForceOff","ForceRestart","GracefulShutdown","PushPowerButton"]}}}`},
	{"POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset", ``},
	{"PATCH /redfish/v1/Systems/1", `{"@odata.id":"/redfish/v1/Systems/1","Id":"1","PowerState":"On"}`},
	{"DELETE /redfish/v1/SessionService/Sessions/1", ``},
}

var fuzzStatus = []int{http.StatusOK, http.StatusCreated, http.StatusNoContent, http.StatusBadRequest, http.StatusUnauthorized,
	http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusInternalServerError, http.StatusServiceUnavailable}

func fuzzDocIndex(route string) byte {
	for i, d := range fuzzDocs {
		if d.route == route {
			return byte(i)
		}
	}

	panic("no document " + route)
}

// FuzzRedfishReply serves a BMC whose every document is good but one, which the fuzzer
// writes (body and status), and has Anvil dial it and read or set the power and the
// boot override through gofish's decoding: a hostile or broken BMC gets an error, never
// a crash or a hang, and no error carries the password.
func FuzzRedfishReply(f *testing.F) {
	for _, d := range fuzzDocs {
		name := strings.NewReplacer(" ", "", "/", "-", ".", "").Replace(strings.ToLower(d.route))
		fuzzcorpus.Seed(f, fuzzcorpus.E(name, fuzzDocIndex(d.route), byte(0), byte(0), d.body))
	}

	system := fuzzDocs[3].body
	fuzzcorpus.Seed(f,
		fuzzcorpus.E("system-exploded", fuzzDocIndex("GET /redfish/v1/Systems/1"), byte(0), byte(1), strings.Replace(system, `"On"`, `"Exploded"`, 1)),
		fuzzcorpus.E("system-off", fuzzDocIndex("GET /redfish/v1/Systems/1"), byte(0), byte(2), strings.Replace(system, `"On"`, `"Off"`, 1)),
		fuzzcorpus.E("system-no-actions", fuzzDocIndex("GET /redfish/v1/Systems/1"), byte(0), byte(3), `{"@odata.id":"/redfish/v1/Systems/1","Id":"1","PowerState":"On"}`),
		fuzzcorpus.E("system-null", fuzzDocIndex("GET /redfish/v1/Systems/1"), byte(0), byte(0), `null`),
		fuzzcorpus.E("systems-wrong-type", fuzzDocIndex("GET /redfish/v1/Systems"), byte(0), byte(0), `{"Members":"x"}`),
		fuzzcorpus.E("systems-two", fuzzDocIndex("GET /redfish/v1/Systems"), byte(0), byte(0), `{"Members":[{"@odata.id":"/redfish/v1/Systems/1"},{"@odata.id":"/redfish/v1/Systems/2"}]}`),
		fuzzcorpus.E("systems-deep", fuzzDocIndex("GET /redfish/v1/Systems"), byte(0), byte(0), strings.Repeat("[", 4096)),
		fuzzcorpus.E("root-html", fuzzDocIndex("GET /redfish/v1/"), byte(0), byte(0), `<html>hello</html>`),
		fuzzcorpus.E("root-truncated", fuzzDocIndex("GET /redfish/v1/"), byte(0), byte(0), `{"Systems":`),
		fuzzcorpus.E("session-401", fuzzDocIndex("POST /redfish/v1/SessionService/Sessions"), byte(4), byte(0),
			`{"error":{"code":"Base.1.0.NoValidSession","message":"bad password for admin","@Message.ExtendedInfo":[{"MessageId":"Base.1.0.NoValidSession"}]}}`),
		fuzzcorpus.E("systems-403", fuzzDocIndex("GET /redfish/v1/Systems"), byte(5), byte(0), `{"error":{"code":"Base.1.0.InsufficientPrivilege","message":"no"}}`),
		fuzzcorpus.E("reset-500", fuzzDocIndex("POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset"), byte(8), byte(2), `kaput`),
		fuzzcorpus.E("patch-400", fuzzDocIndex("PATCH /redfish/v1/Systems/1"), byte(3), byte(3), `{"error":{"code":"Base.1.0.PropertyValueNotInList"}}`),
	)

	var (
		mu              sync.Mutex
		which, statusOf int
		override        string
	)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()

		route := r.Method + " " + r.URL.Path

		for i, d := range fuzzDocs {
			if d.route != route {
				continue
			}

			body, code := d.body, http.StatusOK

			switch {
			case i == which:
				body, code = override, statusOf
			case strings.HasPrefix(route, "POST /redfish/v1/SessionService"):
				code = http.StatusCreated
			case strings.HasPrefix(route, "POST"), strings.HasPrefix(route, "DELETE"):
				code = http.StatusNoContent
			}

			if strings.HasPrefix(route, "POST /redfish/v1/SessionService") {
				w.Header().Set("X-Auth-Token", "tok-1")
				w.Header().Set("Location", "/redfish/v1/SessionService/Sessions/1")
			}

			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = w.Write([]byte(body))

			return
		}

		http.NotFound(w, r)
	}))
	f.Cleanup(srv.Close)

	const password = "pa55-w0rd-fuzz-secret"

	ep := power.Endpoint{Address: srv.URL, Username: testUser, Password: password}

	ops := []func(context.Context, power.Client) error{
		func(ctx context.Context, c power.Client) error { _, err := c.PowerState(ctx); return err }, //nolint:nlreturn // one line each
		func(ctx context.Context, c power.Client) error { return c.SetPXEOnce(ctx, power.BootModeUEFI) },
		func(ctx context.Context, c power.Client) error { return c.PowerOn(ctx) },
		func(ctx context.Context, c power.Client) error { return c.SetPXEOnce(ctx, power.BootModeAuto) },
	}

	f.Fuzz(func(t *testing.T, doc, code, op byte, body string) {
		mu.Lock()
		which, statusOf, override = int(doc)%len(fuzzDocs), fuzzStatus[int(code)%len(fuzzStatus)], body
		mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		c, err := dial(ctx, ep, nil)
		if err == nil {
			err = ops[int(op)%len(ops)](ctx, c)
			c.Close()
		}

		if ctx.Err() != nil {
			t.Fatalf("the BMC's reply held the call for its whole deadline: %v", err)
		}

		if err != nil && strings.Contains(err.Error(), password) {
			t.Fatalf("error names the password: %v", err)
		}
	})
}
