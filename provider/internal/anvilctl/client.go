package anvilctl

import (
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/controlclient"
)

// app holds the global flags and the connection, opened on first use.
type app struct {
	endpoint string
	caCert   string
	cert     string
	key      string

	conn *grpc.ClientConn
}

func (a *app) connect() (*grpc.ClientConn, error) {
	if a.conn != nil {
		return a.conn, nil
	}

	var err error

	a.conn, err = controlclient.Dial(controlclient.Options{Endpoint: a.endpoint, CACert: a.caCert, Cert: a.cert, Key: a.key})

	return a.conn, err
}

func (a *app) state() (state.State, error) {
	conn, err := a.connect()
	if err != nil {
		return nil, err
	}

	return controlclient.State(conn), nil
}

func (a *app) transitions() (controlv1.TransitionServiceClient, error) {
	conn, err := a.connect()
	if err != nil {
		return nil, err
	}

	return controlclient.Transitions(conn), nil
}

func (a *app) close() error {
	if a.conn == nil {
		return nil
	}

	return a.conn.Close()
}
