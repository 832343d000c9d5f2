package pods

// What a nodekit node does with every field of the pod spec. Each field of
// v1.PodSpec, v1.Container (and so v1.EphemeralContainerCommon),
// v1.EphemeralContainer, v1.SecurityContext and v1.PodSecurityContext is in
// exactly one of the three tables below, with a pointer to the code that
// handles it; TestPodSpecFieldTable walks those types by reflection and
// fails for a field in none of them (a new Kubernetes field is a failing
// test, not a silent gap) or in more than one, and for an entry that names
// no field.
//
// Keys are "<Type>.<json name>": PodSpec, Container, EphemeralContainer,
// SecurityContext, PodSecurityContext.

// fieldsActedOn are the fields the node acts on, and where.
var fieldsActedOn = map[string]string{
	"PodSpec.volumes":                       "volume/ (the volume manager mounts each source; image sources: runtime/sync.go pulls them, the runtime mounts them)",
	"PodSpec.initContainers":                "runtime/actions.go computeInitActions (init containers in order; sidecars)",
	"PodSpec.containers":                    "runtime/ (PodManager.SyncPod)",
	"PodSpec.ephemeralContainers":           "runtime/actions.go computePodActions (ephemeralToStart)",
	"PodSpec.restartPolicy":                 "podstate/restart.go (ContainerShouldRestart, the one restart decision)",
	"PodSpec.terminationGracePeriodSeconds": "runtime/kill.go",
	"PodSpec.activeDeadlineSeconds":         "pods/deadline.go (DeadlineExceeded)",
	"PodSpec.dnsPolicy":                     "runtime/dns.go",
	"PodSpec.nodeSelector":                  "pods/admission.go GeneralPredicates (NodeAffinity)",
	"PodSpec.serviceAccountName":            "volume/projected.go (service account tokens)",
	"PodSpec.serviceAccount":                "deprecated alias of serviceAccountName, which the API server keeps in step",
	"PodSpec.nodeName":                      "pods/admission.go GeneralPredicates (NodeName)",
	"PodSpec.hostNetwork":                   "runtime/sandbox.go namespaceOptions; pods/podspec.go Sysctls",
	"PodSpec.hostPID":                       "runtime/sandbox.go namespaceOptions",
	"PodSpec.hostIPC":                       "runtime/sandbox.go namespaceOptions; pods/podspec.go Sysctls",
	"PodSpec.shareProcessNamespace":         "runtime/sandbox.go namespaceOptions",
	"PodSpec.securityContext":               "runtime/sandbox.go and runtime/container.go (see the PodSecurityContext entries)",
	"PodSpec.imagePullSecrets":              "runtime/backend.go and runtime/credentials.go (image pulls)",
	"PodSpec.hostname":                      "runtime/dns.go podHostname",
	"PodSpec.subdomain":                     "runtime/dns.go podHostname; runtime/volumes.go (/etc/hosts)",
	"PodSpec.affinity":                      "pods/admission.go GeneralPredicates (required node affinity)",
	"PodSpec.tolerations":                   "pods/admission.go GeneralPredicates (NoExecute taints); eviction/admit.go",
	"PodSpec.hostAliases":                   "runtime/volumes.go (/etc/hosts)",
	"PodSpec.priority":                      "eviction/rank.go; nodeshutdown/ (shutdownGracePeriodByPodPriority)",
	"PodSpec.priorityClassName":             "eviction/critical.go (system-node-critical, system-cluster-critical)",
	"PodSpec.dnsConfig":                     "runtime/dns.go",
	"PodSpec.readinessGates":                "status/podstatus/conditions.go",
	"PodSpec.runtimeClassName":              "runtime/sandbox.go (the runtime handler)",
	"PodSpec.enableServiceLinks":            "runtime/env.go",
	"PodSpec.overhead":                      "pods/admission.go (PodRequests includes it); cgroupdriver/resources.go",
	"PodSpec.setHostnameAsFQDN":             "runtime/dns.go podHostname",
	"PodSpec.os":                            "pods/admission.go osAndGroupsPolicy (PodOSNotSupported)",
	"PodSpec.hostUsers":                     "userns/ (agent.UserNamespaces: the pod's ID mappings), runtime/sandbox.go and runtime/container.go (CRI userns options, idmapped mounts); FailedCreatePodSandBox where the runtime handler has no user namespaces; without the manager refused with PodFeatureUnsupported, pods/podspec.go PodFeatures; pods/podspec.go Sysctls (user namespace sysctls)",
	"PodSpec.resources":                     "cgroupdriver/resources.go (pod cgroup); runtime/container.go (limits of containers without their own); pods/admission.go; eviction/; resized in place: pods/resize.go (allocation), runtime/resize.go (pod cgroup, then containers)",
	"PodSpec.hostnameOverride":              "runtime/dns.go podHostname; runtime/volumes.go (/etc/hosts)",

	"Container.name":                     "runtime/ (container identity, labels)",
	"Container.image":                    "runtime/images.go",
	"Container.command":                  "runtime/container.go (with runtime/expand.go)",
	"Container.args":                     "runtime/container.go (with runtime/expand.go)",
	"Container.workingDir":               "runtime/container.go",
	"Container.ports":                    "runtime/sandbox.go (host port mappings); pods/admission.go (NodePorts); prober/ (named ports)",
	"Container.envFrom":                  "runtime/env.go",
	"Container.env":                      "runtime/env.go",
	"Container.resources":                "runtime/container.go (CRI resources); cgroupdriver/; pods/admission.go; resized in place: pods/resize.go (allocation), runtime/resize.go",
	"Container.restartPolicy":            "podstate/restart.go",
	"Container.restartPolicyRules":       "podstate/restart.go; RestartAllContainers: runtime/sync.go resetAll, status/podstatus (AllContainersRestarting)",
	"Container.volumeMounts":             "runtime/volumes.go",
	"Container.livenessProbe":            "prober/; runtime/actions.go (the kill)",
	"Container.readinessProbe":           "prober/",
	"Container.startupProbe":             "prober/; runtime/actions.go (the kill)",
	"Container.lifecycle":                "runtime/hooks.go (postStart, preStop; stopSignal is alpha, off, dropped by the API server)",
	"Container.resizePolicy":             "runtime/actions.go resizeAction: NotRequired resizes in place (UpdateContainerResources), RestartContainer restarts the container",
	"Container.terminationMessagePath":   "runtime/container.go",
	"Container.terminationMessagePolicy": "runtime/container.go (FallbackToLogsOnError)",
	"Container.imagePullPolicy":          "runtime/images.go",
	"Container.securityContext":          "runtime/container.go securityContext (see the SecurityContext entries)",
	"Container.stdin":                    "runtime/container.go; server/ (attach)",
	"Container.stdinOnce":                "runtime/container.go",
	"Container.tty":                      "runtime/container.go; server/streaming.go",

	"EphemeralContainer.targetContainerName": "runtime/sync.go (the target's process namespace)",

	"SecurityContext.capabilities":             "runtime/container.go",
	"SecurityContext.privileged":               "runtime/container.go; runtime/sandbox.go",
	"SecurityContext.seLinuxOptions":           "runtime/container.go",
	"SecurityContext.windowsOptions":           "Windows only: a Linux kubelet ignores it too",
	"SecurityContext.runAsUser":                "runtime/container.go",
	"SecurityContext.runAsGroup":               "runtime/container.go",
	"SecurityContext.runAsNonRoot":             "runtime/container.go verifyRunAsNonRoot",
	"SecurityContext.readOnlyRootFilesystem":   "runtime/container.go",
	"SecurityContext.allowPrivilegeEscalation": "runtime/container.go (no_new_privs)",
	"SecurityContext.procMount":                "runtime/container.go (Unmasked: no masked or read-only paths)",
	"SecurityContext.seccompProfile":           "runtime/container.go seccompProfile (with seccompDefault)",
	"SecurityContext.appArmorProfile":          "runtime/container.go appArmorProfile; pods/podspec.go AppArmor",

	"PodSecurityContext.seLinuxOptions":           "runtime/sandbox.go; runtime/container.go",
	"PodSecurityContext.windowsOptions":           "Windows only: a Linux kubelet ignores it too",
	"PodSecurityContext.runAsUser":                "runtime/sandbox.go; runtime/container.go",
	"PodSecurityContext.runAsGroup":               "runtime/sandbox.go; runtime/container.go",
	"PodSecurityContext.runAsNonRoot":             "runtime/container.go verifyRunAsNonRoot",
	"PodSecurityContext.supplementalGroups":       "runtime/sandbox.go supplementalGroups",
	"PodSecurityContext.supplementalGroupsPolicy": "runtime/sandbox.go supplementalGroupsPolicy; pods/admission.go (Strict needs the runtime's support)",
	"PodSecurityContext.fsGroup":                  "volume/ (ownership of the volumes); runtime/sandbox.go",
	"PodSecurityContext.fsGroupChangePolicy":      "volume/ (ownership is always applied, as Always; OnRootMismatch only skips work)",
	"PodSecurityContext.sysctls":                  "runtime/sandbox.go (CRI sysctls); pods/podspec.go Sysctls (SysctlForbidden)",
	"PodSecurityContext.seccompProfile":           "runtime/container.go seccompProfile",
	"PodSecurityContext.appArmorProfile":          "runtime/container.go appArmorProfile; pods/podspec.go AppArmor",
	"PodSpec.resourceClaims":                      "dra/ (agent.DRA: prepared before the sandbox, runtime/sync.go; CDI devices, runtime/container.go); without it refused with PodFeatureUnsupported, pods/podspec.go PodFeatures",
	"PodSecurityContext.seLinuxChangePolicy":      "runtime/volumes.go (volumes are relabelled recursively, the Recursive policy; MountOption needs SELinuxMount)",
}

// fieldsRefused are the fields a pod cannot use on this node: such a pod
// is refused at admission with the reason given, never run without them.
var fieldsRefused = map[string]string{
	"Container.volumeDevices": "PodFeatureUnsupported: pods/podspec.go PodFeatures (no raw block volumes)",
}

// fieldsNotForTheNode are the fields only the API server, the scheduler or
// controllers act on; a kubelet reads none of them either.
var fieldsNotForTheNode = map[string]string{
	"PodSpec.automountServiceAccountToken": "API server (the ServiceAccount admission adds the token volume)",
	"PodSpec.schedulerName":                "kube-scheduler",
	"PodSpec.preemptionPolicy":             "kube-scheduler",
	"PodSpec.topologySpreadConstraints":    "kube-scheduler",
	"PodSpec.schedulingGates":              "kube-scheduler",
	"PodSpec.schedulingGroup":              "kube-scheduler (gang scheduling)",
	"PodSpec.evictionResponders":           "API server and controllers (EvictionRequest API)",
}
