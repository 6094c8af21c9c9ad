package redfish

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The lab's Redfish service lives in hack/internal, which Go's internal rule keeps out
// of reach of this package; the tests run it as its own process (lab-redfish), built
// once here.
var labRedfish string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "anvil-redfish-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	labRedfish = filepath.Join(dir, "lab-redfish")

	out, err := exec.Command("go", "build", "-o", labRedfish, "github.com/anvil-metal/anvil/hack/cmd/lab-redfish").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building lab-redfish: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}

	code := m.Run()

	os.RemoveAll(dir)
	os.Exit(code)
}

const (
	testUser     = "admin"
	testPassword = "pa55-w0rd-not-in-errors"
)

// service is one running lab-redfish.
type service struct {
	URL     string `json:"url"`
	HTTPURL string `json:"http_url"`
	CertPEM string `json:"cert_pem"`

	stderr *strings.Builder
}

// startService runs lab-redfish with args; it stops when the test ends (its stdin closes).
func startService(t *testing.T, args ...string) *service {
	t.Helper()

	cmd := exec.Command(labRedfish, append([]string{"-username", testUser}, args...)...)
	cmd.Env = append(os.Environ(), "LAB_REDFISH_PASSWORD="+testPassword)

	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)

	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)

	s := &service{stderr: &strings.Builder{}}
	cmd.Stderr = s.stderr

	require.NoError(t, cmd.Start())

	done := make(chan struct{})

	go func() {
		defer close(done)

		cmd.Wait() //nolint:errcheck // the exit is checked through done
	}()

	t.Cleanup(func() {
		stdin.Close()

		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill() // fails only if it is gone already
			<-done
		}
	})

	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	require.NoError(t, err, "lab-redfish did not start: %s", s.stderr)
	require.NoError(t, json.Unmarshal(line, s))

	return s
}

// host is the service's host:port.
func (s *service) host() string { return strings.TrimPrefix(s.URL, "https://") }

// get reads a document or a fake machine's calls from the service with basic auth.
func (s *service) get(t *testing.T, path string, v any) {
	t.Helper()

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the test's own service

	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, s.URL+path, nil)
	require.NoError(t, err)
	req.SetBasicAuth(testUser, testPassword)

	resp, err := hc.Do(req)
	require.NoError(t, err)

	if resp.StatusCode == http.StatusUnauthorized {
		// A session-only service: a session of the test's own, for this request.
		resp.Body.Close()

		login, err := hc.Post(s.URL+"/redfish/v1/SessionService/Sessions", "application/json",
			strings.NewReader(`{"UserName":"`+testUser+`","Password":"`+testPassword+`"}`))
		require.NoError(t, err)
		login.Body.Close()
		require.Equal(t, http.StatusCreated, login.StatusCode)

		req.Header.Del("Authorization")
		req.Header.Set("X-Auth-Token", login.Header.Get("X-Auth-Token"))

		resp, err = hc.Do(req)
		require.NoError(t, err)

		defer func() {
			logout, err := http.NewRequestWithContext(context.Background(), http.MethodDelete, s.URL+login.Header.Get("Location"), nil)
			require.NoError(t, err)
			logout.Header.Set("X-Auth-Token", login.Header.Get("X-Auth-Token"))

			r, err := hc.Do(logout)
			require.NoError(t, err)
			r.Body.Close()
		}()
	}

	defer resp.Body.Close()

	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", path, b)
	require.NoError(t, json.Unmarshal(b, v), "GET %s: %s", path, b)
}

func (s *service) calls(t *testing.T, uuid string) []string {
	t.Helper()

	var calls []string
	s.get(t, "/fake/"+uuid+"/calls", &calls)

	return calls
}
