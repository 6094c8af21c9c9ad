// Package replica is what one provider replica of a site needs beside the others on a
// shared etcd: the client (TLS only), the election of the one leader that acts on the
// world, the fence that makes a deposed leader's writes fail inside etcd, the gate that
// stops its side effects before its lease can have expired, the secrets every replica
// must share, and the health that tells a replica serving from one that must not.
package replica
