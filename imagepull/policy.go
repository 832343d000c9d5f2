package imagepull

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
)

// policy decides whether a pod must prove it may use an image present on
// the node: pulledByKubelet tells whether the node's records say the
// kubelet (or a nodekit agent) pulled it.
type policy func(image string, pulledByKubelet bool) bool

// newPolicy returns the kubelet's imagePullCredentialsVerificationPolicy
// p ("" is its default, NeverVerifyPreloadedImages); allowlist is
// preloadedImagesVerificationAllowlist, for NeverVerifyAllowlistedImages.
func newPolicy(p kubeletconfig.ImagePullCredentialsVerificationPolicy, allowlist []string) (policy, error) {
	switch p {
	case kubeletconfig.NeverVerify:
		return func(string, bool) bool { return false }, nil
	case kubeletconfig.NeverVerifyPreloadedImages, "":
		return func(_ string, pulledByKubelet bool) bool { return pulledByKubelet }, nil
	case kubeletconfig.AlwaysVerify:
		return func(string, bool) bool { return true }, nil
	case kubeletconfig.NeverVerifyAllowlistedImages:
		exact := map[string]bool{}
		var prefixes []string
		for _, pattern := range allowlist {
			p, wildcard, err := allowlistPattern(pattern)
			if err != nil {
				return nil, err
			}
			if wildcard {
				prefixes = append(prefixes, p)
			} else {
				exact[p] = true
			}
		}
		return func(image string, _ bool) bool {
			name, err := trimTagDigest(image)
			if err != nil {
				name = image // match what the pod says, as the kubelet
			}
			if exact[name] {
				return false
			}
			for _, p := range prefixes {
				if strings.HasPrefix(name, p) {
					return false
				}
			}
			return true
		}, nil
	}
	return nil, fmt.Errorf("unknown image pull credential verification policy: %v", p)
}

// ValidateAllowlist checks preloadedImagesVerificationAllowlist's patterns
// as the kubelet: an image name without tag or digest
// ("registry.example/team/image"), or a prefix ending in "/*"
// ("registry.example/team/*"), with no surrounding spaces and no other
// "*".
func ValidateAllowlist(patterns []string) error {
	for _, p := range patterns {
		if _, _, err := allowlistPattern(p); err != nil {
			return err
		}
	}
	return nil
}

// allowlistPattern returns an allowlist entry's image name, or its prefix
// (with the trailing "/") for a wildcard.
func allowlistPattern(pattern string) (string, bool, error) {
	if pattern != strings.TrimSpace(pattern) {
		return "", false, fmt.Errorf("leading/trailing spaces are not allowed: %s", pattern)
	}
	trimmed, wildcard := strings.CutSuffix(pattern, "/*")
	if wildcard {
		trimmed += "/"
	}
	if trimmed == "" {
		return "", false, fmt.Errorf("the supplied pattern is too short: %s", pattern)
	}
	if strings.ContainsRune(trimmed, '*') {
		return "", false, fmt.Errorf("not a valid wildcard pattern, only patterns ending with '/*' are allowed: %s", pattern)
	}
	if wildcard {
		if len(trimmed) == 1 {
			return "", false, fmt.Errorf("at least registry hostname is required")
		}
		return trimmed, true, nil
	}
	name, err := trimTagDigest(trimmed)
	if err != nil {
		return "", false, fmt.Errorf("failed to parse as an image name: %w", err)
	}
	if name != trimmed {
		return "", false, fmt.Errorf("neither tag nor digest is accepted in an image reference: %s", pattern)
	}
	return trimmed, false, nil
}

// trimTagDigest returns image without its tag and digest, as written (not
// normalized: "nginx:1" is "nginx"), the key of a pulled record's
// credential mapping.
func trimTagDigest(image string) (string, error) {
	ref, err := reference.Parse(image)
	if err != nil {
		return "", err
	}
	if d, ok := ref.(reference.Digested); ok {
		var found bool
		if image, found = strings.CutSuffix(image, "@"+d.Digest().String()); !found {
			return "", fmt.Errorf("digest was not specified last, this does not appear to be a valid image spec: %q", image)
		}
	}
	if t, ok := ref.(reference.Tagged); ok {
		var found bool
		if image, found = strings.CutSuffix(image, ":"+t.Tag()); !found {
			return "", fmt.Errorf("tag %q was not specified last (or before the digest), this does not appear to be a valid image spec: %q", t.Tag(), image)
		}
	}
	return image, nil
}
