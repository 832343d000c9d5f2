package kubeletparity

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/serializer"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
)

// toV1beta1 converts the kubelet's internal configuration to the versioned
// type nodekit uses.
func toV1beta1(t *testing.T, in *kubeletconfiginternal.KubeletConfiguration) *kubeletconfig.KubeletConfiguration {
	t.Helper()
	scheme, _, err := kubeletscheme.NewSchemeAndCodecs()
	if err != nil {
		t.Fatal(err)
	}
	out := &kubeletconfig.KubeletConfiguration{}
	if err := scheme.Convert(in, out, nil); err != nil {
		t.Fatal(err)
	}
	out.TypeMeta = kubeletconfig.KubeletConfiguration{}.TypeMeta
	return out
}

// decodeInternal decodes a configuration file as the kubelet's file loader
// does: strictly, defaulted, into the internal type.
func decodeInternal(codecs *serializer.CodecFactory, data []byte) (*kubeletconfiginternal.KubeletConfiguration, error) {
	obj, _, err := codecs.UniversalDecoder().Decode(data, nil, &kubeletconfiginternal.KubeletConfiguration{})
	if err != nil {
		return nil, err
	}
	return obj.(*kubeletconfiginternal.KubeletConfiguration), nil
}

// asKubeletRuns is kc as the kubelet would run with it: converted to the
// kubelet's internal type and back, as the kubelet's own configuration is
// when the tests read it (a field the internal type holds as a plain value,
// such as enableSystemLogQuery, comes back set), without its type
// metadata.
func asKubeletRuns(t *testing.T, kc *kubeletconfig.KubeletConfiguration) *kubeletconfig.KubeletConfiguration {
	t.Helper()
	scheme, _, err := kubeletscheme.NewSchemeAndCodecs()
	if err != nil {
		t.Fatal(err)
	}
	internal := &kubeletconfiginternal.KubeletConfiguration{}
	if err := scheme.Convert(kc.DeepCopy(), internal, nil); err != nil {
		t.Fatal(err)
	}
	return toV1beta1(t, internal)
}
