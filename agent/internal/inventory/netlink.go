package inventory

import (
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
)

// rtNetlink is the real Netlink over one rtnetlink socket.
type rtNetlink struct {
	conn *rtnetlink.Conn
}

// DialNetlink opens rtnetlink; cfg may name another network namespace
// (cfg.NetNS), which is how tests read a namespace of their own.
func DialNetlink(cfg *netlink.Config) (Netlink, error) {
	conn, err := rtnetlink.Dial(cfg)
	if err != nil {
		return nil, fmt.Errorf("error dialing rtnetlink: %w", err)
	}

	return &rtNetlink{conn: conn}, nil
}

func (n *rtNetlink) Links() ([]rtnetlink.LinkMessage, error) { return n.conn.Link.List() }

func (n *rtNetlink) Addresses() ([]rtnetlink.AddressMessage, error) { return n.conn.Address.List() }

func (n *rtNetlink) Routes() ([]rtnetlink.RouteMessage, error) { return n.conn.Route.List() }

func (n *rtNetlink) Close() error { return n.conn.Close() }
