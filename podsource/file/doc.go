// Package file is the kubelet's "file" pod source: static pods from the
// manifests in a directory (staticPodPath), or from one manifest file.
//
// A Source reads every entry of the directory whose name does not start
// with a dot, in name order, without recursing into subdirectories
// (symbolic links are followed). Each file holds one Pod in YAML or JSON
// (apiVersion v1, kind Pod, at most 10 MiB; of a YAML file with several
// documents only the first is used, as by the kubelet). The pod gets the
// API server's defaults and the kubelet's static pod fields (see
// podsource/manifest): name <name>-<node>, namespace default when empty,
// UID and kubernetes.io/config.hash from a hash of the pod, the node name
// and the file's path, a toleration of every NoExecute taint.
//
// The directory is read at once, on every change inotify reports (an entry
// created, removed, renamed, closed after writing, or changed in mode;
// Linux only, elsewhere it is only read periodically) and every
// CheckFrequency (20 s by default),
// and the complete set of pods goes to the podsource.Config when it
// changed — an empty set too, so the Config's AllReady turns true on a node
// without static pods, or whose path does not exist.
//
// Bad manifests never stop the source: a file that cannot be read or
// decoded, fails validation (manifest.Validate), or names a pod another
// file already names (the file whose pod runs keeps the name; of two new
// files, the first in name order), is reported with its path —
// a log line and a Warning event on the Node, once until it changes — and
// ignored; if it held a valid pod before, that pod keeps running as last
// read until the file is fixed or removed. The kubelet instead drops such
// a pod at its next periodic read; keeping it means an editor saving a
// half-written file, or a typo, does not kill a control plane component.
// Unknown and duplicate fields are ignored with a warning, as the kubelet
// ignores them, unless Options.Strict. An empty file is taken as one not
// written yet: ignored without a report (its last pod, if any, kept).
//
// Editing a manifest changes its pod's UID (unless the manifest sets
// metadata.uid), so the Config delivers REMOVE for the old pod and ADD for
// the new one, and the agent replaces the pod, as the kubelet does.
// Renaming the file does the same. With metadata.uid set, an edit is an
// UPDATE.
//
// # Swapping pieces
//
// Without fx, build the Source with New and pass it to podsource.New in
// Options.Sources. With fx, Module adds it to the podsource.SourceGroup
// value group from the file.Options in the graph (nothing when Path is
// empty). An embedder changes it by decorating file.Options, replaces it by
// leaving Module out and providing its own source named "file", or uses
// podsource/manifest to build a source of its own format.
package file
