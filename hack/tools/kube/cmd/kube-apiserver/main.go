// Command kube-apiserver is the Kubernetes API server built from the k8s.io/kubernetes
// module at the version this tools module pins, for controller-runtime's envtest (the
// Cluster API tests): no prebuilt binary can be downloaded here, so it is built from
// source, the way upstream's cmd/kube-apiserver starts it.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
