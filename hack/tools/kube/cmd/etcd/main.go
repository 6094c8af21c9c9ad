// Command etcd is etcd's server, built from go.etcd.io/etcd/server/v3 at the version
// k8s.io/kubernetes requires, as the storage envtest starts beside kube-apiserver: no
// prebuilt binary can be downloaded here, so it is built from source.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
