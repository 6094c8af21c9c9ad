package dhcpbench

// UDPRcvbufErrors reads namespace ns's UDP RcvbufErrors counter: datagrams dropped
// because a socket's receive buffer was full (the storm benchmark reads it too).
func UDPRcvbufErrors(ns string) (int64, error) { return udpRcvbufErrors(ns) }
