package siderolink

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"

	"github.com/anvil-metal/anvil/internal/bootparams"
)

// Join is how a machine joins Omni, as Talos would: the kernel arguments of Omni's join
// configuration, parsed.
type Join struct {
	// API is Omni's Provision API; nil when the cmdline names none (no Omni to join).
	API *API
	// EventsSink is Omni's event sink, host:port; "" when the cmdline names none.
	EventsSink string
	// KernelLog is where the kernel log goes, tcp:// or udp:// with host:port; nil when
	// the cmdline names none.
	KernelLog *url.URL
}

// API is siderolink.api parsed as Talos parses it (internal/pkg/endpoint): a
// value without a scheme is grpc://; grpc:// is dialled in plaintext, https:// with TLS.
type API struct {
	// Host is host:port. Without a port it is 443, the port grpc-go would dial.
	Host string
	// Insecure is true for grpc://: plaintext gRPC, as Talos dials it.
	Insecure bool
	// JoinToken is the "jointoken" query parameter, passed on as it is (a v2 token is
	// Omni's to read). It is never logged: String leaves it out.
	JoinToken string
}

// String is the API without its join token, for logs.
func (a API) String() string {
	scheme := "https"
	if a.Insecure {
		scheme = "grpc"
	}

	return scheme + "://" + a.Host + "?jointoken=REDACTED"
}

// GoString keeps the join token out of %#v too.
func (a API) GoString() string { return "siderolink.API(" + a.String() + ")" }

// schemePrefix is how Talos tells a URL from a bare host:port.
var schemePrefix = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*://`)

// ParseJoin parses Omni's kernel arguments: siderolink.api, talos.events.sink and
// talos.logging.kernel, each "" when absent. Each malformed one is an error naming its
// parameter; none of them repeats the join token, or any part of siderolink.api where
// it might be.
func ParseJoin(api, eventsSink, kernelLog string) (Join, error) {
	var (
		o    Join
		errs []error
		err  error
	)

	if api != "" {
		if o.API, err = parseAPI(api); err != nil {
			errs = append(errs, err)
		}
	}

	if eventsSink != "" {
		if o.EventsSink, err = parseEventsSink(eventsSink); err != nil {
			errs = append(errs, err)
		}
	}

	if kernelLog != "" {
		if o.KernelLog, err = parseKernelLog(kernelLog); err != nil {
			errs = append(errs, err)
		}
	}

	if len(errs) > 0 {
		return Join{}, errors.Join(errs...)
	}

	return o, nil
}

func parseAPI(v string) (*API, error) {
	name := bootparams.SideroLinkAPI

	if !schemePrefix.MatchString(v) {
		v = "grpc://" + v
	}

	// url.Parse's errors quote the URL, join token and all: they are not passed on.
	u, err := url.Parse(v)
	if err != nil {
		return nil, fmt.Errorf("%s is not a URL", name)
	}

	api := &API{JoinToken: u.Query().Get("jointoken")}

	switch u.Scheme {
	case "grpc":
		api.Insecure = true
	case "https":
	default:
		return nil, fmt.Errorf("%s: scheme %q is neither grpc:// nor https://", name, u.Scheme)
	}

	if u.Hostname() == "" {
		return nil, fmt.Errorf("%s names no host", name)
	}

	port := u.Port()
	if port == "" {
		port = "443"
	}

	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return nil, fmt.Errorf("%s: the port of %s is not a port number", name, u.Hostname())
	}

	api.Host = net.JoinHostPort(u.Hostname(), port)

	if api.JoinToken == "" {
		return nil, fmt.Errorf("%s has no jointoken parameter: Omni would refuse the machine", name)
	}

	return api, nil
}

func parseEventsSink(v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil || host == "" {
		return "", fmt.Errorf("%s=%q is not host:port", bootparams.EventsSink, v)
	}

	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return "", fmt.Errorf("%s=%q: %q is not a port number", bootparams.EventsSink, v, port)
	}

	return v, nil
}

func parseKernelLog(v string) (*url.URL, error) {
	name := bootparams.LoggingKernel

	u, err := url.Parse(v)
	if err != nil {
		return nil, fmt.Errorf("%s=%q is not a URL", name, v)
	}

	if u.Scheme != "tcp" && u.Scheme != "udp" {
		return nil, fmt.Errorf("%s=%q: the scheme is neither tcp:// nor udp://", name, v)
	}

	if u.Hostname() == "" {
		return nil, fmt.Errorf("%s=%q names no host", name, v)
	}

	if p, err := strconv.ParseUint(u.Port(), 10, 16); err != nil || p == 0 {
		return nil, fmt.Errorf("%s=%q: the port is missing or not a port number", name, v)
	}

	return u, nil
}
