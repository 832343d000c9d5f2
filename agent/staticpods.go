package agent

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/podsource/file"
	"github.com/nodekit/nodekit/podsource/manifest"
	"github.com/nodekit/nodekit/podsource/mirror"
	"github.com/nodekit/nodekit/podsource/url"
	"github.com/nodekit/nodekit/status"
)

// StaticPods adds the static pod sources of the *Config to the pod sources
// (with podsource.AsSource): the manifest directory (staticPodPath,
// --pod-manifest-path, read on every change and every fileCheckFrequency)
// and the manifest URL (staticPodURL, --manifest-url with the
// --manifest-url-header headers, fetched every httpCheckFrequency). An
// empty path or URL adds no source. A bad manifest is logged and recorded
// as a Warning event on the Node. Core and Standalone include it; change a
// source with fx.Decorate on file.Options or url.Options.
var StaticPods = fx.Options(
	fx.Provide(
		// The node watch, not the Reporter's NodeAnyWay: the events need
		// only the registered Node's UID, and the Reporter depends on the
		// runtime's health, which depends on the pod sources.
		func(cfg *Config, w *status.NodeWatch) file.Options { return cfg.FileSourceOptions(w) },
		func(cfg *Config, w *status.NodeWatch) url.Options { return cfg.URLSourceOptions(w) },
	),
	file.Module,
	url.Module,
)

// MirrorPods makes the static pods visible in the API server as mirror
// pods (podsource/mirror), through the pod loop (pods.MirrorClient): Core
// includes it, Standalone does not. Change it with fx.Decorate on
// mirror.Options, or on pods.MirrorClient to wrap the client.
var MirrorPods = fx.Options(
	fx.Provide(
		func(cfg *Config, w *status.NodeWatch) mirror.Options { return cfg.MirrorOptions(w.Node) },
		func(c *mirror.Client) pods.MirrorClient { return c },
	),
	mirror.Module,
)

// FileSourceOptions returns the manifest directory source's options
// (staticPodPath, fileCheckFrequency); Path is empty when none is
// configured. node gives the Node's UID to the events about bad manifests
// once it is known (see NodeEventRef).
func (cfg *Config) FileSourceOptions(node pods.NodeGetter) file.Options {
	return file.Options{
		Path:           cfg.Kubelet.StaticPodPath,
		NodeName:       cfg.NodeName,
		CheckFrequency: cfg.Kubelet.FileCheckFrequency.Duration,
		NodeRef:        NodeEventRef(cfg.NodeName, node),
	}
}

// URLSourceOptions returns the manifest URL source's options (staticPodURL,
// staticPodURLHeader, httpCheckFrequency); URL is empty when none is
// configured. node is as for FileSourceOptions.
func (cfg *Config) URLSourceOptions(node pods.NodeGetter) url.Options {
	var header http.Header
	if len(cfg.Kubelet.StaticPodURLHeader) > 0 {
		header = make(http.Header, len(cfg.Kubelet.StaticPodURLHeader))
		for k, vs := range cfg.Kubelet.StaticPodURLHeader {
			for _, v := range vs {
				header.Add(k, v)
			}
		}
	}
	return url.Options{
		URL:            cfg.Kubelet.StaticPodURL,
		Header:         header,
		NodeName:       cfg.NodeName,
		CheckFrequency: cfg.Kubelet.HTTPCheckFrequency.Duration,
		NodeRef:        NodeEventRef(cfg.NodeName, node),
	}
}

// MirrorOptions returns the mirror pod client's options; node returns the
// Node as last seen (status.NodeWatch.Node fits): mirror pods are owned by
// it. The client comes from the graph (mirror.Module) or the caller.
func (cfg *Config) MirrorOptions(node func() (*v1.Node, bool)) mirror.Options {
	return mirror.Options{NodeName: cfg.NodeName, Node: node}
}

// NodeEventRef returns the reference of the node's events at the time of
// each event, as the kubelet's (v1.37) nodeRefWithUID: apiVersion v1, kind
// Node, the node's name, and its UID once node knows it (never on a
// standalone node).
func NodeEventRef(nodeName string, node pods.NodeGetter) func() *v1.ObjectReference {
	return func() *v1.ObjectReference {
		ref := manifest.NodeReference(nodeName)
		if n, ok := node.Node(); ok {
			ref.UID = n.UID
		}
		return ref
	}
}

// headerValue is a pflag.Value for --manifest-url-header, the kubelet's
// colon-separated multimap: "name:value,name:value", repeatable; the first
// use on the command line replaces the configuration file's headers, later
// ones add to them.
type headerValue struct {
	m   *map[string][]string
	set bool
}

func (v *headerValue) String() string {
	if v.m == nil || len(*v.m) == 0 {
		return ""
	}
	names := make([]string, 0, len(*v.m))
	for k := range *v.m {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		for _, val := range (*v.m)[k] {
			parts = append(parts, k+":"+val)
		}
	}
	return strings.Join(parts, ",")
}

func (v *headerValue) Set(s string) error {
	if !v.set || *v.m == nil {
		*v.m = map[string][]string{}
		v.set = true
	}
	for _, pair := range strings.Split(s, ",") {
		if pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return fmt.Errorf("--manifest-url-header: %q: want name:value", pair)
		}
		(*v.m)[name] = append((*v.m)[name], strings.TrimSpace(value))
	}
	return nil
}

func (v *headerValue) Type() string { return "colonSeparatedMultimapStringString" }
