package pxe

import (
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the counters of the boot services. A nil *Metrics is valid and counts
// nowhere.
type Metrics struct {
	received  *prometheus.CounterVec
	answered  *prometheus.CounterVec
	ignored   *prometheus.CounterVec
	malformed *prometheus.CounterVec
	sendErrs  *prometheus.CounterVec

	tftpTransfers *prometheus.CounterVec
	tftpBytes     prometheus.Counter
	tftpErrors    *prometheus.CounterVec
}

// NewMetrics creates the counters and registers them with reg (skipped when reg is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_pxe_dhcp_received_total",
			Help: "DHCP packets received, by server (proxy, bootserver, dhcp).",
		}, []string{"server"}),
		answered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_pxe_dhcp_answered_total",
			Help: "DHCP replies sent, by server and message type.",
		}, []string{"server", "type"}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_pxe_dhcp_ignored_total",
			Help: "DHCP packets not answered, by server and reason.",
		}, []string{"server", "reason"}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_pxe_dhcp_malformed_total",
			Help: "DHCP packets that could not be parsed or had malformed options, by server.",
		}, []string{"server"}),
		sendErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_pxe_dhcp_send_errors_total",
			Help: "DHCP replies that could not be sent, by server.",
		}, []string{"server"}),
		tftpTransfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_pxe_tftp_transfers_total",
			Help: "TFTP read transfers, by result (success, failure, aborted: the client ended after the option acknowledgement, as UEFI firmware does to learn the size).",
		}, []string{"result"}),
		tftpBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "anvil_pxe_tftp_bytes_total",
			Help: "Bytes sent by TFTP.",
		}),
		tftpErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_pxe_tftp_errors_total",
			Help: "TFTP requests refused or failed, by reason.",
		}, []string{"reason"}),
	}

	// Children with known labels exist from the start, at 0, for dashboards to find.
	for _, result := range []string{"success", "failure", "aborted"} {
		m.tftpTransfers.WithLabelValues(result)
	}

	for _, reason := range []string{"refused", "not_found", "open", "malformed", "busy", "client_busy"} {
		m.tftpErrors.WithLabelValues(reason)
	}

	if reg != nil {
		reg.MustRegister(m.received, m.answered, m.ignored, m.malformed, m.sendErrs,
			m.tftpTransfers, m.tftpBytes, m.tftpErrors)
	}

	return m
}

// dhcpCounters are one server's counters, resolved once so the packet path does no label
// lookups for the common cases.
type dhcpCounters struct {
	m         *Metrics
	server    string
	received  prometheus.Counter
	malformed prometheus.Counter
	sendErrs  prometheus.Counter
	offer     prometheus.Counter
	ack       prometheus.Counter
	nak       prometheus.Counter
}

func (m *Metrics) dhcp(server string) *dhcpCounters {
	if m == nil {
		m = NewMetrics(nil)
	}

	for _, e := range ignoreErrors {
		m.ignored.WithLabelValues(server, e.reason)
	}

	for _, reason := range []string{"other", "error", "unready"} {
		m.ignored.WithLabelValues(server, reason)
	}

	return &dhcpCounters{
		m:         m,
		server:    server,
		received:  m.received.WithLabelValues(server),
		malformed: m.malformed.WithLabelValues(server),
		sendErrs:  m.sendErrs.WithLabelValues(server),
		offer:     m.answered.WithLabelValues(server, "offer"),
		ack:       m.answered.WithLabelValues(server, "ack"),
		nak:       m.answered.WithLabelValues(server, "nak"),
	}
}

func (c *dhcpCounters) answered(mt dhcpv4.MessageType) {
	switch mt {
	case dhcpv4.MessageTypeOffer:
		c.offer.Inc()
	case dhcpv4.MessageTypeAck:
		c.ack.Inc()
	case dhcpv4.MessageTypeNak:
		c.nak.Inc()
	default:
		c.m.answered.WithLabelValues(c.server, "other").Inc()
	}
}

func (c *dhcpCounters) ignored(reason string) {
	c.m.ignored.WithLabelValues(c.server, reason).Inc()
}
