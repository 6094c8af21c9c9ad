package inventory

import (
	"context"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"go.uber.org/zap"
)

// netlinkPoller owns one netlink connection for a controller's Run: it is
// opened on first use, dropped on error so the next tick dials again, and
// closed when Run returns.
type netlinkPoller struct {
	dial func() (Netlink, error)
	conn Netlink
}

// get returns the open connection, dialing if needed.
func (p *netlinkPoller) get(logger *zap.Logger) Netlink {
	if p.conn != nil {
		return p.conn
	}

	conn, err := p.dial()
	if err != nil {
		logger.Warn("error opening netlink", zap.Error(err))

		return nil
	}

	p.conn = conn

	return conn
}

// drop closes a connection that failed, so the next tick starts clean.
func (p *netlinkPoller) drop() {
	if p.conn != nil {
		p.conn.Close()

		p.conn = nil
	}
}

// poll calls reconcile on the first event and every interval until ctx is
// done, telling pass when the first call has ended. A source error is logged
// and retried on the next tick.
func (p *netlinkPoller) poll(ctx context.Context, r controller.Runtime, logger *zap.Logger, interval time.Duration,
	pass *firstPass, reconcile func(conn Netlink) (sourceErr, stateErr error),
) error {
	defer p.drop()

	ticker := time.NewTicker(interval)
	defer ticker.Stop()

	pace := pass.pacer(ticker.C)

	for pace.next(ctx, r) {
		conn := p.get(logger)
		if conn == nil {
			continue
		}

		sourceErr, stateErr := reconcile(conn)
		if stateErr != nil {
			return stateErr
		}

		if sourceErr != nil {
			logger.Warn("error reading netlink", zap.Error(sourceErr))
			p.drop()
		}
	}

	return nil
}

// linkNames maps link indexes to names for addresses and routes.
func linkNames(conn Netlink) (map[uint32]string, error) {
	links, err := conn.Links()
	if err != nil {
		return nil, err
	}

	names := make(map[uint32]string, len(links))

	for _, link := range links {
		if link.Attributes != nil {
			names[link.Index] = link.Attributes.Name
		}
	}

	return names, nil
}
