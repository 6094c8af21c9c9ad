package omni

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	omniadapterv1 "github.com/anvil-metal/anvil/api/omniadapter/v1"
)

// pushTimeout bounds one call to the provider.
const pushTimeout = 10 * time.Second

// pushJoinArgs hands every new join config to the provider, over the socket it serves
// the adapter on, until ctx is done; a failed hand-over is tried again.
func (c *Connection) pushJoinArgs(ctx context.Context) error {
	client, closeConn, err := c.providerClient()
	if err != nil {
		return err
	}

	defer closeConn()

	var (
		sent       []string
		sentConfig string
	)

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.joinChanged:
		case <-time.After(retryMax):
		}

		args, ok := c.JoinArgs()
		config := c.joinConfigDocs()

		if !ok || (sent != nil && slices.Equal(sent, args) && sentConfig == config) {
			continue
		}

		callCtx, cancel := context.WithTimeout(ctx, pushTimeout)
		_, err := client.SetJoinConfig(callCtx, &omniadapterv1.SetJoinConfigRequest{KernelArgs: args, Config: config})

		cancel()

		if err != nil {
			c.opts.Logger.Warn("error handing Omni's join config to the provider; trying again", zap.Error(err))

			continue
		}

		sent, sentConfig = args, config
	}
}

// joinConfigDocs is the join config's documents, "" until read.
func (c *Connection) joinConfigDocs() string {
	c.mu.Lock()
	defer c.mu.Unlock()

	return c.joinConfig
}

// providerClient is a client of the adapter API the provider serves on its socket, and
// what closes its connection.
func (c *Connection) providerClient() (omniadapterv1.OmniAdapterServiceClient, func(), error) {
	conn, err := grpc.NewClient("unix://"+c.opts.ProviderSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("error dialing the provider at %s: %w", c.opts.ProviderSocket, err)
	}

	return omniadapterv1.NewOmniAdapterServiceClient(conn), func() { conn.Close() }, nil
}
