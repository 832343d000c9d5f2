// Package url is the kubelet's "http" pod source: static pods from a
// manifest URL (staticPodURL, with the staticPodURLHeader headers).
//
// A Source GETs the URL at once and every CheckFrequency (20 s by default)
// with a 10 s timeout. The body, at most 10 MiB, is a Pod or a PodList in
// YAML or JSON. Each pod gets the API server's defaults and the kubelet's
// static pod fields (see podsource/manifest): name <name>-<node>,
// namespace default when empty, UID and kubernetes.io/config.hash from a
// hash of the pod and the URL. Unlike file pods, URL pods get no NoExecute
// toleration, as with the kubelet. A body equal to the previous one is not
// decoded again; an empty body means no pods.
//
// Failures never stop the source and leave the pods as last sent: a failed
// request, a status other than 200 OK, a body too large or one that cannot
// be decoded is reported with the URL — a log line and a Warning event on
// the Node, once until it changes. An item of a PodList that is invalid (or
// names a pod an earlier item names) is reported and dropped, keeping the
// pod last sent under its name if any; the other items are used (the
// kubelet drops the whole list). Until the first usable body the source
// sends nothing, so the Config is not AllReady, as with the kubelet.
//
// The package is named url after the source; import it under another name
// where net/url is used too.
//
// # Swapping pieces
//
// Without fx, build the Source with New and pass it to podsource.New in
// Options.Sources. With fx, Module adds it to the podsource.SourceGroup
// value group from the url.Options in the graph (nothing when URL is
// empty). An embedder changes it by decorating url.Options (say, a Client
// with TLS settings), or replaces it by leaving Module out and providing its
// own source named "http".
package url
