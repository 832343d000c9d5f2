package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/nodekit/nodekit/podsource"
)

// MaxSize is the largest manifest the sources read, the kubelet's
// maxConfigLength: 10 MiB.
const MaxSize = 10 << 20

// Options configures a Decoder.
type Options struct {
	// NodeName is the node the pods run on; required. It is part of their
	// names, UIDs and spec.nodeName.
	NodeName string
	// Source is the name of the source the manifests come from; required.
	// podsource.FileSource pods get the kubelet's file rules (UID hashed
	// with the node name and the path; a toleration of every NoExecute
	// taint), podsource.HTTPSource pods the URL rules (UID hashed with the
	// URL), any other source the file rules without the toleration.
	Source string
	// Strict makes unknown and duplicate fields errors. By default they are
	// dropped with a warning, as the kubelet (which decodes manifests
	// leniently) silently drops them.
	Strict bool
}

// Decoder turns static pod manifests into pods the agent runs: decoded,
// defaulted as the API server would (podsource.SetDefaults), given the
// kubelet's static pod fields (SetStaticDefaults) and validated (Validate).
// It is stateless and safe for concurrent use.
type Decoder struct {
	opts Options
}

// NewDecoder validates opts and returns a Decoder.
func NewDecoder(opts Options) (*Decoder, error) {
	if opts.NodeName == "" {
		return nil, errors.New("podsource/manifest: Options.NodeName is required")
	}
	if errs := validation.IsDNS1123Subdomain(opts.NodeName); len(errs) > 0 {
		return nil, fmt.Errorf("podsource/manifest: invalid node name %q: %s", opts.NodeName, strings.Join(errs, "; "))
	}
	if opts.Source == "" {
		return nil, errors.New("podsource/manifest: Options.Source is required")
	}
	return &Decoder{opts: opts}, nil
}

// Result is what Pods decoded.
type Result struct {
	// Pods are the valid pods, in manifest order; the caller owns them.
	Pods []*v1.Pod
	// Invalid are the items of a PodList that could not be used; the other
	// items are in Pods.
	Invalid []InvalidItem
	// Warnings say what was accepted but ignored (unknown or duplicate
	// fields, YAML documents after the first).
	Warnings []string
}

// InvalidItem is an item of a PodList that could not be used.
type InvalidItem struct {
	// Index is the item's position in the list.
	Index int
	// Namespace and Name are those the pod would have had (the generated
	// <name>-<node> name, namespace "default" when empty); empty when the
	// item has no readable name.
	Namespace, Name string
	// Err says why.
	Err error
}

// Pod decodes data, one Pod manifest in YAML or JSON read from location (a
// file path; it is part of the pod's UID), as the kubelet's file source
// does: apiVersion v1 and kind Pod are required, metadata.name too. It
// returns the pod (the caller owns it) and warnings, or an error saying
// why the manifest cannot be used.
func (d *Decoder) Pod(data []byte, location string) (*v1.Pod, []string, error) {
	j, warnings, err := toJSON(data)
	if err != nil {
		return nil, nil, err
	}
	tm, err := readTypeMeta(j)
	if err != nil {
		return nil, nil, err
	}
	if tm.APIVersion != "v1" || tm.Kind != "Pod" {
		return nil, nil, fmt.Errorf("apiVersion %q, kind %q: want apiVersion v1, kind Pod", tm.APIVersion, tm.Kind)
	}
	pod, more, err := d.decodePod(j, "", location)
	return pod, append(warnings, more...), err
}

// Pods decodes data, a Pod or a PodList manifest in YAML or JSON read from
// location (a URL; it is part of the pods' UIDs), as the kubelet's HTTP
// source does. An error means the whole manifest cannot be used; an item of
// a list that cannot be used is in Result.Invalid and does not affect the
// others.
func (d *Decoder) Pods(data []byte, location string) (*Result, error) {
	j, warnings, err := toJSON(data)
	if err != nil {
		return nil, err
	}
	tm, err := readTypeMeta(j)
	if err != nil {
		return nil, err
	}
	res := &Result{Warnings: warnings}
	switch {
	case tm.APIVersion == "v1" && tm.Kind == "Pod":
		pod, more, err := d.decodePod(j, "", location)
		if err != nil {
			return nil, err
		}
		res.Pods = []*v1.Pod{pod}
		res.Warnings = append(res.Warnings, more...)
		return res, nil
	case tm.APIVersion == "v1" && tm.Kind == "PodList":
	default:
		return nil, fmt.Errorf("apiVersion %q, kind %q: want apiVersion v1, kind Pod or PodList", tm.APIVersion, tm.Kind)
	}

	var list struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata,omitempty"`
		Items           []json.RawMessage `json:"items"`
	}
	strictErrs, err := kjson.UnmarshalStrict(j, &list)
	if err != nil {
		return nil, fmt.Errorf("decode PodList: %w", err)
	}
	// Items are decoded one by one below, with their own strict errors.
	if err := d.strict(strictErrs, &res.Warnings); err != nil {
		return nil, err
	}
	for i, raw := range list.Items {
		path := fmt.Sprintf("items[%d]", i)
		pod, more, err := d.decodePod(raw, path, location)
		if err != nil {
			item := InvalidItem{Index: i, Err: fmt.Errorf("%s: %w", path, err)}
			item.Namespace, item.Name = d.nameOf(raw)
			res.Invalid = append(res.Invalid, item)
			continue
		}
		res.Pods = append(res.Pods, pod)
		res.Warnings = append(res.Warnings, more...)
	}
	return res, nil
}

// decodePod decodes one pod from JSON (an item of a list at path, or the
// whole manifest when path is empty), defaults, completes and validates it.
func (d *Decoder) decodePod(j []byte, path, location string) (*v1.Pod, []string, error) {
	pod := &v1.Pod{}
	strictErrs, err := kjson.UnmarshalStrict(j, pod)
	if err != nil {
		return nil, nil, fmt.Errorf("decode Pod: %w", err)
	}
	var warnings []string
	if path != "" {
		for i, e := range strictErrs {
			strictErrs[i] = fmt.Errorf("%s: %w", path, e)
		}
	}
	if err := d.strict(strictErrs, &warnings); err != nil {
		return nil, nil, err
	}
	if pod.Name == "" {
		return nil, nil, errors.New("metadata.name: Required value: a static pod needs a name")
	}
	pod.TypeMeta = metav1.TypeMeta{}
	podsource.SetDefaults(pod)
	if err := SetStaticDefaults(pod, d.opts.NodeName, d.opts.Source, location); err != nil {
		return nil, nil, err
	}
	if err := Validate(pod); err != nil {
		return nil, nil, err
	}
	return pod, warnings, nil
}

// strict turns the strict decoding errors into an error (Options.Strict)
// or warnings appended to warnings.
func (d *Decoder) strict(errs []error, warnings *[]string) error {
	if len(errs) == 0 {
		return nil
	}
	if d.opts.Strict {
		return fmt.Errorf("strict decoding: %w", errors.Join(errs...))
	}
	for _, e := range errs {
		*warnings = append(*warnings, e.Error()+" (ignored)")
	}
	return nil
}

// nameOf reads the namespace and generated name of a list item that could
// not be decoded, best effort.
func (d *Decoder) nameOf(raw []byte) (namespace, name string) {
	var meta struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &meta); err != nil || meta.Metadata.Name == "" {
		return "", ""
	}
	namespace = meta.Metadata.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	return namespace, GeneratePodName(meta.Metadata.Name, d.opts.NodeName)
}

// toJSON converts a YAML or JSON manifest to JSON as the kubelet does (JSON
// as is, YAML's first document), warning when YAML documents after the
// first are ignored.
func toJSON(data []byte) ([]byte, []string, error) {
	if utilyaml.IsJSONBuffer(data) {
		return data, nil, nil
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, nil, fmt.Errorf("YAML: %w", err)
	}
	var warnings []string
	if n := yamlDocuments(data); n > 1 {
		warnings = append(warnings, fmt.Sprintf("the manifest holds %d YAML documents; only the first is used", n))
	}
	return j, warnings, nil
}

// yamlDocuments counts the YAML documents in data that are not empty.
func yamlDocuments(data []byte) int {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	n := 0
	for {
		doc, err := r.Read()
		if len(doc) > 0 {
			if j, jerr := yaml.YAMLToJSON(doc); jerr != nil || !bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
				n++
			}
		}
		if err != nil {
			return n
		}
	}
}

// readTypeMeta reads apiVersion and kind.
func readTypeMeta(j []byte) (metav1.TypeMeta, error) {
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(j, &tm); err != nil {
		return tm, fmt.Errorf("decode: %w", err)
	}
	if tm.Kind == "" {
		return tm, errors.New("kind is missing")
	}
	return tm, nil
}
