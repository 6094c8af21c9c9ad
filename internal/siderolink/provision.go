package siderolink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	pb "github.com/siderolabs/siderolink/api/siderolink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// provisionTimeout bounds one Provision call, as Talos bounds its own: Omni answers once
// it has created the machine's peer, within seconds.
const provisionTimeout = 30 * time.Second

// provisioned is a Provision response, checked, and the node key it was asked with.
type provisioned struct {
	nodeKey       wgtypes.Key
	serverKey     wgtypes.Key
	serverAddress netip.Addr
	nodePrefix    netip.Prefix
	// endpoints are Omni's WireGuard endpoints, host:port, tried in turn.
	endpoints []string
}

// provision asks Omni's Provision API for the node's place on SideroLink, as Talos asks:
// the same request fields, TLS or not by the URL's scheme.
//
// Unlike Talos, which keeps one WireGuard key for the whole boot, every Provision presents
// a key of its own: the machine is known to Omni by its UUID and unique token, not by its
// key, so nothing is lost, and a re-join then never rides on a WireGuard session of the
// configuration it replaces, and shows in Omni (the Link's node public key changes, Omni
// logs the new peer) — a machine that re-joined can be told from one that merely
// handshook again.
func (r *runner) provision(ctx context.Context) (provisioned, error) {
	nodeKey, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return provisioned{}, fmt.Errorf("error generating the WireGuard key: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, provisionTimeout)
	defer cancel()

	creds := insecure.NewCredentials()
	if !r.opts.Insecure {
		creds = credentials.NewTLS(&tls.Config{RootCAs: r.opts.RootCAs, MinVersion: tls.VersionTLS12})
	}

	conn, err := grpc.NewClient(r.opts.API, grpc.WithTransportCredentials(creds))
	if err != nil {
		return provisioned{}, fmt.Errorf("error dialing the Provision API %s: %w", r.opts.API, err)
	}

	defer conn.Close()

	publicKey := nodeKey.PublicKey().String()
	req := &pb.ProvisionRequest{
		NodeUuid:        r.opts.UUID,
		NodePublicKey:   publicKey,
		JoinToken:       &r.opts.JoinToken,
		NodeUniqueToken: &r.uniqueToken,
		TalosVersion:    &r.opts.TalosVersion,
	}

	// grpc's status errors carry Omni's message, which names no token of the request.
	resp, err := pb.NewProvisionServiceClient(conn).Provision(ctx, req)
	if err != nil {
		return provisioned{}, fmt.Errorf("error calling Provision at %s: %w", r.opts.API, err)
	}

	p, err := checkResponse(resp)
	p.nodeKey = nodeKey

	return p, err
}

// checkResponse reads a Provision response: every field the link needs, well formed.
func checkResponse(resp *pb.ProvisionResponse) (provisioned, error) {
	var (
		p    provisioned
		errs []error
		err  error
	)

	if resp.GetGrpcPeerAddrPort() != "" {
		// Omni forces WireGuard over gRPC (its --siderolink-use-grpc-tunnel, or the
		// machine's GRPCTunnelConfig): packets would ride the Provision connection,
		// which the agent does not do.
		return provisioned{}, errors.New("the Provision response asks for WireGuard over gRPC (Omni's grpc tunnel mode), which the agent does not support: turn the tunnel off for this machine")
	}

	if p.serverKey, err = wgtypes.ParseKey(resp.GetServerPublicKey()); err != nil {
		errs = append(errs, fmt.Errorf("server public key %q: %w", resp.GetServerPublicKey(), err))
	}

	if p.serverAddress, err = netip.ParseAddr(resp.GetServerAddress()); err != nil {
		errs = append(errs, fmt.Errorf("server address: %w", err))
	}

	if p.nodePrefix, err = netip.ParsePrefix(resp.GetNodeAddressPrefix()); err != nil {
		errs = append(errs, fmt.Errorf("node address: %w", err))
	}

	for _, ep := range resp.GetEndpoints() {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			errs = append(errs, fmt.Errorf("endpoint: %w", err))

			continue
		}

		p.endpoints = append(p.endpoints, ep)
	}

	if len(resp.GetEndpoints()) == 0 {
		errs = append(errs, errors.New("no endpoint"))
	}

	if len(errs) > 0 {
		return provisioned{}, fmt.Errorf("malformed Provision response: %w", errors.Join(errs...))
	}

	return p, nil
}
