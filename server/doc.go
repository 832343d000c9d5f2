// Package server is the kubelet's node API: the HTTPS server on port 10250
// that the API server, kubectl (logs, exec, attach, port-forward, top),
// metrics-server and Prometheus talk to, and the optional plain-HTTP
// read-only port.
//
// # What it serves
//
// With the kubelet's paths, status codes and error texts (k8s.io/kubernetes
// v1.37 pkg/kubelet/server):
//
//   - /healthz (and /healthz/ping, /healthz/log, /healthz/syncloop, plus
//     Options.HealthChecks), /pods, /runningpods/, /configz;
//   - /metrics, /metrics/resource, /metrics/cadvisor, /metrics/probes from
//     the prometheus.Gatherers in Options, /metrics/slis (the healthz
//     checks' SLIs), /stats/summary (and
//     ?only_cpu_and_memory=true) from the Summary funcs;
//   - /containerLogs/{namespace}/{pod}/{container} reading the CRI log
//     format (follow, tailLines, limitBytes, sinceSeconds, sinceTime,
//     timestamps, previous; rotated files with Options.ReadRotatedLogs);
//   - /exec, /attach, /portForward and /run through the CRI: the runtime's
//     streaming URL is proxied to (SPDY and the pre-v5 WebSocket upgrades
//     pass through unchanged). As the kubelet with ExtendWebSocketsToKubelet,
//     which the node declares, a v5.channel.k8s.io WebSocket exec or attach
//     is translated to SPDY with the runtime, and a SPDY-over-WebSocket
//     port-forward (SPDY/3.1+portforward.k8s.io) is tunneled to it
//     (kubelet_websocket_streaming_requests_total counts both), so the API
//     server proxies kubectl's WebSockets unchanged; /checkpoint through
//     CRI CheckpointContainer;
//   - /logs/ (files and directory listings under /var/log) and
//     /debug/pprof/.
//
// # Security
//
// Every request on the secure port is authenticated (x509 client
// certificates against the client CA file, reloaded when it changes;
// bearer tokens from the Authorization header or a WebSocket request's
// base64url.bearer.authorization.k8s.io protocol, through TokenReview with
// a cache of answers — a failed review is never cached; anonymous only
// when enabled; else 401) and authorized (SubjectAccessReview on
// nodes/<node> with the kubelet's path → subresource mapping and the
// fine-grained pods/healthz/configz fallback to proxy, cached 5m/30s; or
// AlwaysAllow; else 403). This behaves as the kubelet's delegating
// authenticator and authorizer from k8s.io/apiserver, whose
// apiserver_delegated_authn_* / apiserver_delegated_authz_* metrics it
// records, without linking them (README says why). The
// servers bound a request's headers to 10 s (ReadHeaderTimeout). The serving
// certificate is tlsCertFile/tlsPrivateKeyFile (reloaded when they
// change), a self-signed pair in the certificate directory, or, with
// serverTLSBootstrap, issued through the CertificateSigningRequest API and
// rotated by client-go's certificate manager. HTTP/2 is offered by ALPN.
//
// # Swapping pieces
//
// Routes are the unit of replacement. Add a Route to Options.Routes (or,
// with fx, with AsRoute): a route with the same Path as a
// default one replaces it, a route with a nil Handler removes it, others
// are added. Authentication and authorization wrap every route; a Route
// can name the subresources it is authorized against. A node whose pods
// are not run by a CRI runtime replaces the containerLogs, exec, attach
// and portForward routes with its own handlers (and leaves Runtime nil);
// those must serve the WebSocket protocols above too, or the node must not
// declare ExtendWebSocketsToKubelet (status.SetterOptions).
// Options.Authenticator and Options.Authorizer replace the built-in
// authentication and authorization.
//
// # Not implemented
//
// The journal/log query mode of /logs/ (enableSystemLogQuery; accepted and
// logged as ignored), /debug/flags/v, /statusz, /flagz and /allocatedPods
// (404; their authorization mapping is in place).
package server
