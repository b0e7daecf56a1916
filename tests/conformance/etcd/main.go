// Command etcd is the etcd server of the registry.k8s.io/etcd:3.7.0-0 image that the
// conformance suite's sample-apiserver spec runs beside it (/usr/local/bin/etcd), built
// from go.etcd.io/etcd/server/v3 as etcd's own server/main.go does. A module of its own:
// etcd's server module is not in the conformance module's graph, and requiring it there
// could move versions shared with e2e.test.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
