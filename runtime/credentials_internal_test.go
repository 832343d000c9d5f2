package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestCredentialHashIsTheKubelets: the hash of a secret's credentials is
// the kubelet's (the SHA-256 of its AuthConfig's JSON, empty fields left
// out), so the image pull records a kubelet wrote match nodekit's pods.
func TestCredentialHashIsTheKubelets(t *testing.T) {
	for _, tc := range []struct {
		entry dockerConfigEntry
		json  string
	}{
		{dockerConfigEntry{username: "alice", password: "s3cret"}, `{"username":"alice","password":"s3cret"}`},
		{dockerConfigEntry{username: "bob", password: "pw", email: "bob@example.com"}, `{"username":"bob","password":"pw","email":"bob@example.com"}`},
		{dockerConfigEntry{}, `{}`},
	} {
		sum := sha256.Sum256([]byte(tc.json))
		if got, want := credentialHash(tc.entry), hex.EncodeToString(sum[:]); got != want {
			t.Errorf("hash of %+v = %s, want %s (of %s)", tc.entry, got, want, tc.json)
		}
	}
}
