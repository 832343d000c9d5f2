package runtime

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
)

// dockerConfigEntry is one registry's credentials in a docker config.
type dockerConfigEntry struct {
	username, password, email string
}

func (e *dockerConfigEntry) UnmarshalJSON(data []byte) error {
	var raw struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Email    string `json:"email"`
		Auth     string `json:"auth"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	e.username, e.password, e.email = raw.Username, raw.Password, raw.Email
	if raw.Auth == "" {
		return nil
	}
	enc := base64.StdEncoding
	if !strings.HasSuffix(strings.TrimSpace(raw.Auth), "=") {
		enc = base64.RawStdEncoding
	}
	decoded, err := enc.DecodeString(raw.Auth)
	if err != nil {
		return fmt.Errorf("decode auth field: %w", err)
	}
	user, pass, ok := strings.Cut(string(decoded), ":")
	if !ok {
		return fmt.Errorf("auth field does not hold user:password")
	}
	e.username, e.password = user, strings.Trim(pass, "\x00")
	return nil
}

// keyring holds the credentials of image pull secrets by registry key
// (host[:port][/path]), as the kubelet's basic docker keyring.
type keyring struct {
	keys  []string // reverse-sorted, so longer paths match first
	creds map[string][]pullCredential
}

// pullCredential is one registry's credentials from one pull secret: what
// the CRI is given, and the secret's coordinates with the hash of the
// credentials, which the image pull records keep (the kubelet's
// TrackedAuthConfig).
type pullCredential struct {
	auth   *runtimeapi.AuthConfig
	secret kubeletconfig.ImagePullSecret
}

// credentialHash is the kubelet's hash of a secret's credentials for a
// registry: the hex SHA-256 of its AuthConfig's JSON (username, password,
// email, each left out when empty), so records written by a kubelet and by
// nodekit match.
func credentialHash(e dockerConfigEntry) string {
	data, err := json.Marshal(struct {
		Username string `json:"username,omitempty"`
		Password string `json:"password,omitempty"`
		Email    string `json:"email,omitempty"`
	}{e.username, e.password, e.email})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// newKeyring reads kubernetes.io/dockerconfigjson and kubernetes.io/dockercfg
// secrets; other secrets are ignored. A secret whose config does not parse
// is an error naming it.
func newKeyring(secrets []v1.Secret) (*keyring, error) {
	k := &keyring{creds: map[string][]pullCredential{}}
	for i := range secrets {
		s := &secrets[i]
		var cfg map[string]dockerConfigEntry
		switch {
		case s.Type == v1.SecretTypeDockerConfigJson && len(s.Data[v1.DockerConfigJsonKey]) > 0:
			var wrapped struct {
				Auths map[string]dockerConfigEntry `json:"auths"`
			}
			if err := json.Unmarshal(s.Data[v1.DockerConfigJsonKey], &wrapped); err != nil {
				return nil, fmt.Errorf("image pull secret %s/%s: %w", s.Namespace, s.Name, err)
			}
			cfg = wrapped.Auths
		case s.Type == v1.SecretTypeDockercfg && len(s.Data[v1.DockerConfigKey]) > 0:
			if err := json.Unmarshal(s.Data[v1.DockerConfigKey], &cfg); err != nil {
				return nil, fmt.Errorf("image pull secret %s/%s: %w", s.Namespace, s.Name, err)
			}
		default:
			continue
		}
		for _, registry := range sortedKeys(cfg) {
			key, ok := registryKey(registry)
			if !ok {
				continue
			}
			e := cfg[registry]
			k.creds[key] = append(k.creds[key], pullCredential{
				auth: &runtimeapi.AuthConfig{Username: e.username, Password: e.password},
				secret: kubeletconfig.ImagePullSecret{UID: string(s.UID), Namespace: s.Namespace, Name: s.Name,
					CredentialHash: credentialHash(e)},
			})
		}
	}
	for key := range k.creds {
		k.keys = append(k.keys, key)
	}
	slices.Sort(k.keys)
	slices.Reverse(k.keys)
	return k, nil
}

// registryKey normalizes a docker config registry entry: no scheme, and
// "/v1/" or "/v2/" paths meaning the host itself.
func registryKey(registry string) (string, bool) {
	if !strings.HasPrefix(registry, "https://") && !strings.HasPrefix(registry, "http://") {
		registry = "https://" + registry
	}
	u, err := url.Parse(registry)
	if err != nil || u.Host == "" {
		return "", false
	}
	path := u.Path
	if strings.HasPrefix(path, "/v1/") || strings.HasPrefix(path, "/v2/") {
		path = path[3:]
	}
	if path == "" || path == "/" {
		return u.Host, true
	}
	return u.Host + path, true
}

// lookup returns the credentials for an image repository ("docker.io/
// library/nginx"): those of every key whose host matches (with glob
// components, "*.example.com") and whose path is a prefix of the image's,
// most specific first; else the Docker Hub credentials (index.docker.io) for
// a Docker Hub image.
func (k *keyring) lookup(repo string) []pullCredential {
	var out []pullCredential
	for _, key := range k.keys {
		if urlsMatch(key, repo) {
			out = append(out, k.creds[key]...)
		}
	}
	if len(out) == 0 && isDockerHub(repo) {
		out = append(out, k.creds["index.docker.io"]...)
	}
	return out
}

// urlsMatch reports whether the schemeless target URL matches the glob URL.
func urlsMatch(glob, target string) bool {
	g, err1 := url.Parse("https://" + glob)
	t, err2 := url.Parse("https://" + target)
	if err1 != nil || err2 != nil {
		return false
	}
	gHost, gPort := splitHostPort(g.Host)
	tHost, tPort := splitHostPort(t.Host)
	if gPort != tPort || !strings.HasPrefix(t.Path, g.Path) {
		return false
	}
	gParts, tParts := strings.Split(gHost, "."), strings.Split(tHost, ".")
	if len(gParts) != len(tParts) {
		return false
	}
	for i := range gParts {
		if ok, err := filepath.Match(gParts[i], tParts[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

func splitHostPort(hostport string) (string, string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, ""
	}
	return host, port
}

// isDockerHub reports whether a repository is pulled from Docker Hub.
func isDockerHub(repo string) bool {
	first, _, found := strings.Cut(repo, "/")
	if first == "" {
		return false
	}
	if !found || first == "docker.io" || first == "index.docker.io" {
		return true
	}
	return !strings.ContainsAny(first, ".:")
}
