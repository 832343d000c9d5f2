package podsource

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// IsMirrorPod reports whether pod is a mirror pod: the API object the agent
// creates for a static pod, marked with the kubernetes.io/config.mirror
// annotation (whose value is the static pod's config hash).
func IsMirrorPod(pod *v1.Pod) bool {
	_, ok := pod.Annotations[ConfigMirrorAnnotationKey]
	return ok
}

// IsStaticPod reports whether pod is a static pod: one a Config delivered
// from any source but the API server's (its kubernetes.io/config.source
// annotation is set and not "api"), as the kubelet decides. A static pod is
// run by the agent alone; the API server sees it through its mirror pod.
func IsStaticPod(pod *v1.Pod) bool {
	source, ok := pod.Annotations[ConfigSourceAnnotationKey]
	return ok && source != APIServerSource
}

// MirrorPodFor returns the mirror pod the sources last showed with the
// namespace and name of staticPod, and whether there is one, whatever its
// hash: the caller compares it (IsMirrorPodOf) to decide whether it is
// current. The pod is shared and read-only. It does not block.
func (c *Config) MirrorPodFor(staticPod *v1.Pod) (*v1.Pod, bool) {
	c.podsMu.RLock()
	defer c.podsMu.RUnlock()
	return c.mirrorPodLocked(staticPod.Namespace, staticPod.Name)
}

// StaticPodFor returns the latest version of the static pod with the
// namespace and name of mirrorPod, and whether there is one. The pod is
// shared and read-only. It does not block.
func (c *Config) StaticPodFor(mirrorPod *v1.Pod) (*v1.Pod, bool) {
	c.podsMu.RLock()
	defer c.podsMu.RUnlock()
	return c.staticPodLocked(mirrorPod.Namespace, mirrorPod.Name)
}

// OrphanedMirrorPods returns the mirror pods no static pod of any source
// has the namespace and name of, for the housekeeping to delete once the
// static pod they mirrored stopped. It returns none until AllReady: before
// every source reported, a static pod not read yet would look gone. The
// pods are shared and read-only; their order is unspecified. It does not
// block.
func (c *Config) OrphanedMirrorPods() []*v1.Pod {
	if !c.AllReady() {
		return nil
	}
	c.podsMu.RLock()
	defer c.podsMu.RUnlock()
	var orphans []*v1.Pod
	for _, mirrors := range c.mirrors {
		for _, e := range mirrors {
			if _, ok := c.staticPodLocked(e.pod.Namespace, e.pod.Name); !ok {
				orphans = append(orphans, e.pod)
			}
		}
	}
	return orphans
}

// IsMirrorPodOf reports whether mirrorPod is the current mirror of
// staticPod: same namespace and name, and a mirror annotation equal to the
// static pod's kubernetes.io/config.hash (the kubelet's IsMirrorPodOf).
func IsMirrorPodOf(mirrorPod, staticPod *v1.Pod) bool {
	if mirrorPod.Namespace != staticPod.Namespace || mirrorPod.Name != staticPod.Name {
		return false
	}
	hash, ok := mirrorPod.Annotations[ConfigMirrorAnnotationKey]
	return ok && hash == staticPod.Annotations[ConfigHashAnnotationKey]
}

// mirrorPodLocked finds a mirror pod by namespace and name; podsMu held.
func (c *Config) mirrorPodLocked(namespace, name string) (*v1.Pod, bool) {
	for _, mirrors := range c.mirrors {
		for _, e := range mirrors {
			if e.pod.Namespace == namespace && e.pod.Name == name {
				return e.pod, true
			}
		}
	}
	return nil, false
}

// staticPodLocked finds a static pod by namespace and name; podsMu held.
func (c *Config) staticPodLocked(namespace, name string) (*v1.Pod, bool) {
	for source, pods := range c.pods {
		if source == APIServerSource {
			continue
		}
		for _, e := range pods {
			if e.pod.Namespace == namespace && e.pod.Name == name && IsStaticPod(e.pod) {
				return e.pod, true
			}
		}
	}
	return nil, false
}

// staticPodsOfLocked returns the static pods the mirror pods mirror, each
// once; podsMu held.
func (c *Config) staticPodsOfLocked(mirrors []*v1.Pod) []*v1.Pod {
	var out []*v1.Pod
	seen := make(map[types.UID]bool, len(mirrors))
	for _, m := range mirrors {
		if p, ok := c.staticPodLocked(m.Namespace, m.Name); ok && !seen[p.UID] {
			seen[p.UID] = true
			out = append(out, p)
		}
	}
	return out
}
