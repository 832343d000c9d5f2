// Package apiserver is the kubelet's "api" pod source: the pods bound to the
// node, from the API server.
//
// A Source lists and watches pods in all namespaces with the field selector
// spec.nodeName=<node> through a client-go reflector and sends the complete
// set to its podsource.Config after the initial list and after every
// change, as the kubelet's apiserver config source does. The reflector uses
// watch-list (streaming the initial state) where the client supports it and
// plain list+watch otherwise, e.g. with client-go's fake clientset. When
// Options.NodeHasSynced is set, watching starts only once it returns true,
// polled every NodeSyncPeriod, as the kubelet waits for its Node informer.
//
// # Swapping pieces
//
// Without fx, build the Source with New and pass it to podsource.New in
// Options.Sources. With fx, Module adds it to the podsource.SourceGroup value
// group from the apiserver.Options in the graph (the client defaults to the
// graph's kubernetes.Interface). An embedder replaces it by leaving Module
// out and providing its own podsource.Source named "api" to the group, or
// changes it by decorating apiserver.Options.
package apiserver
