// Package manifest turns static pod manifests into the pods the agent runs,
// as the kubelet's config package does for its file and HTTP sources
// (k8s.io/kubernetes pkg/kubelet/config/common.go), and reports manifests
// that cannot be used.
//
// A Decoder reads YAML or JSON (the first YAML document; apiVersion v1,
// kind Pod, or PodList for URL sources), applies the API server's defaults
// (podsource.SetDefaults) and the kubelet's static pod fields
// (SetStaticDefaults: name <name>-<node>, namespace default, UID and
// kubernetes.io/config.hash from a hash of the pod and its location,
// spec.nodeName, a NoExecute toleration for file pods, phase Pending), then
// validates the pod (Validate, a subset of the API server's validation plus
// the kubelet's rule that static pods reference no API objects). Field names
// are case sensitive. Unknown and duplicate fields are dropped with a
// warning, as the kubelet's lenient decoding drops them silently; with
// Options.Strict they make the manifest invalid.
//
// A Reporter logs a manifest's problem and records it as a Warning event on
// the Node once, until the problem changes or is gone. Manifests are read
// at most MaxSize (10 MiB) long.
//
// # Use in an embedder's source
//
// A source of static pods in a format of its own builds v1.Pods and calls
// podsource.SetDefaults, SetStaticDefaults and Validate in that order (see
// podsource's ExampleSource); a source of Kubernetes manifests uses a
// Decoder with its own Options.Source name.
package manifest
