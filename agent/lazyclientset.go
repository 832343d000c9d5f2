package agent

import (
	"fmt"
	"net/http"
	"sync"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	admissionregistrationv1 "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	admissionregistrationv1alpha1 "k8s.io/client-go/kubernetes/typed/admissionregistration/v1alpha1"
	admissionregistrationv1beta1 "k8s.io/client-go/kubernetes/typed/admissionregistration/v1beta1"
	internalv1alpha1 "k8s.io/client-go/kubernetes/typed/apiserverinternal/v1alpha1"
	appsv1 "k8s.io/client-go/kubernetes/typed/apps/v1"
	appsv1beta1 "k8s.io/client-go/kubernetes/typed/apps/v1beta1"
	appsv1beta2 "k8s.io/client-go/kubernetes/typed/apps/v1beta2"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authenticationv1alpha1 "k8s.io/client-go/kubernetes/typed/authentication/v1alpha1"
	authenticationv1beta1 "k8s.io/client-go/kubernetes/typed/authentication/v1beta1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	authorizationv1beta1 "k8s.io/client-go/kubernetes/typed/authorization/v1beta1"
	autoscalingv1 "k8s.io/client-go/kubernetes/typed/autoscaling/v1"
	autoscalingv2 "k8s.io/client-go/kubernetes/typed/autoscaling/v2"
	batchv1 "k8s.io/client-go/kubernetes/typed/batch/v1"
	batchv1beta1 "k8s.io/client-go/kubernetes/typed/batch/v1beta1"
	certificatesv1 "k8s.io/client-go/kubernetes/typed/certificates/v1"
	certificatesv1alpha1 "k8s.io/client-go/kubernetes/typed/certificates/v1alpha1"
	certificatesv1beta1 "k8s.io/client-go/kubernetes/typed/certificates/v1beta1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	coordinationv1alpha2 "k8s.io/client-go/kubernetes/typed/coordination/v1alpha2"
	coordinationv1beta1 "k8s.io/client-go/kubernetes/typed/coordination/v1beta1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"
	discoveryv1beta1 "k8s.io/client-go/kubernetes/typed/discovery/v1beta1"
	eventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	eventsv1beta1 "k8s.io/client-go/kubernetes/typed/events/v1beta1"
	extensionsv1beta1 "k8s.io/client-go/kubernetes/typed/extensions/v1beta1"
	flowcontrolv1 "k8s.io/client-go/kubernetes/typed/flowcontrol/v1"
	flowcontrolv1beta1 "k8s.io/client-go/kubernetes/typed/flowcontrol/v1beta1"
	flowcontrolv1beta2 "k8s.io/client-go/kubernetes/typed/flowcontrol/v1beta2"
	flowcontrolv1beta3 "k8s.io/client-go/kubernetes/typed/flowcontrol/v1beta3"
	lifecyclev1alpha1 "k8s.io/client-go/kubernetes/typed/lifecycle/v1alpha1"
	networkingv1 "k8s.io/client-go/kubernetes/typed/networking/v1"
	networkingv1beta1 "k8s.io/client-go/kubernetes/typed/networking/v1beta1"
	nodev1 "k8s.io/client-go/kubernetes/typed/node/v1"
	nodev1alpha1 "k8s.io/client-go/kubernetes/typed/node/v1alpha1"
	nodev1beta1 "k8s.io/client-go/kubernetes/typed/node/v1beta1"
	policyv1 "k8s.io/client-go/kubernetes/typed/policy/v1"
	policyv1beta1 "k8s.io/client-go/kubernetes/typed/policy/v1beta1"
	rbacv1 "k8s.io/client-go/kubernetes/typed/rbac/v1"
	rbacv1alpha1 "k8s.io/client-go/kubernetes/typed/rbac/v1alpha1"
	rbacv1beta1 "k8s.io/client-go/kubernetes/typed/rbac/v1beta1"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	resourcev1alpha3 "k8s.io/client-go/kubernetes/typed/resource/v1alpha3"
	resourcev1beta1 "k8s.io/client-go/kubernetes/typed/resource/v1beta1"
	resourcev1beta2 "k8s.io/client-go/kubernetes/typed/resource/v1beta2"
	schedulingv1 "k8s.io/client-go/kubernetes/typed/scheduling/v1"
	schedulingv1alpha3 "k8s.io/client-go/kubernetes/typed/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/client-go/kubernetes/typed/scheduling/v1beta1"
	storagev1 "k8s.io/client-go/kubernetes/typed/storage/v1"
	storagev1alpha1 "k8s.io/client-go/kubernetes/typed/storage/v1alpha1"
	storagev1beta1 "k8s.io/client-go/kubernetes/typed/storage/v1beta1"
	storagemigrationv1 "k8s.io/client-go/kubernetes/typed/storagemigration/v1"
	storagemigrationv1beta1 "k8s.io/client-go/kubernetes/typed/storagemigration/v1beta1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// lazyClientset is a kubernetes.Interface whose API group clients are
// built on first use, on one http.Client and one rate limiter, as
// kubernetes.NewForConfigAndClient builds them all at once. A clientset
// builds a REST client for each of client-go's 56 groups (about 27 KiB per
// agent) where an agent uses a handful; in a fleet every agent pays for
// them. It implements kubernetes.Interface without embedding it, so the
// compiler names any group a newer client-go adds. Safe for concurrent
// use.
type lazyClientset struct {
	config rest.Config
	http   *http.Client

	discovery                     lazy[discovery.DiscoveryInterfaces]
	admissionregistrationV1       lazy[admissionregistrationv1.AdmissionregistrationV1Interface]
	admissionregistrationV1alpha1 lazy[admissionregistrationv1alpha1.AdmissionregistrationV1alpha1Interface]
	admissionregistrationV1beta1  lazy[admissionregistrationv1beta1.AdmissionregistrationV1beta1Interface]
	internalV1alpha1              lazy[internalv1alpha1.InternalV1alpha1Interface]
	appsV1                        lazy[appsv1.AppsV1Interface]
	appsV1beta1                   lazy[appsv1beta1.AppsV1beta1Interface]
	appsV1beta2                   lazy[appsv1beta2.AppsV1beta2Interface]
	authenticationV1              lazy[authenticationv1.AuthenticationV1Interface]
	authenticationV1alpha1        lazy[authenticationv1alpha1.AuthenticationV1alpha1Interface]
	authenticationV1beta1         lazy[authenticationv1beta1.AuthenticationV1beta1Interface]
	authorizationV1               lazy[authorizationv1.AuthorizationV1Interface]
	authorizationV1beta1          lazy[authorizationv1beta1.AuthorizationV1beta1Interface]
	autoscalingV1                 lazy[autoscalingv1.AutoscalingV1Interface]
	autoscalingV2                 lazy[autoscalingv2.AutoscalingV2Interface]
	batchV1                       lazy[batchv1.BatchV1Interface]
	batchV1beta1                  lazy[batchv1beta1.BatchV1beta1Interface]
	certificatesV1                lazy[certificatesv1.CertificatesV1Interface]
	certificatesV1beta1           lazy[certificatesv1beta1.CertificatesV1beta1Interface]
	certificatesV1alpha1          lazy[certificatesv1alpha1.CertificatesV1alpha1Interface]
	coordinationV1alpha2          lazy[coordinationv1alpha2.CoordinationV1alpha2Interface]
	coordinationV1beta1           lazy[coordinationv1beta1.CoordinationV1beta1Interface]
	coordinationV1                lazy[coordinationv1.CoordinationV1Interface]
	coreV1                        lazy[corev1.CoreV1Interface]
	discoveryV1                   lazy[discoveryv1.DiscoveryV1Interface]
	discoveryV1beta1              lazy[discoveryv1beta1.DiscoveryV1beta1Interface]
	eventsV1                      lazy[eventsv1.EventsV1Interface]
	eventsV1beta1                 lazy[eventsv1beta1.EventsV1beta1Interface]
	extensionsV1beta1             lazy[extensionsv1beta1.ExtensionsV1beta1Interface]
	flowcontrolV1                 lazy[flowcontrolv1.FlowcontrolV1Interface]
	flowcontrolV1beta1            lazy[flowcontrolv1beta1.FlowcontrolV1beta1Interface]
	flowcontrolV1beta2            lazy[flowcontrolv1beta2.FlowcontrolV1beta2Interface]
	flowcontrolV1beta3            lazy[flowcontrolv1beta3.FlowcontrolV1beta3Interface]
	lifecycleV1alpha1             lazy[lifecyclev1alpha1.LifecycleV1alpha1Interface]
	networkingV1                  lazy[networkingv1.NetworkingV1Interface]
	networkingV1beta1             lazy[networkingv1beta1.NetworkingV1beta1Interface]
	nodeV1                        lazy[nodev1.NodeV1Interface]
	nodeV1alpha1                  lazy[nodev1alpha1.NodeV1alpha1Interface]
	nodeV1beta1                   lazy[nodev1beta1.NodeV1beta1Interface]
	policyV1                      lazy[policyv1.PolicyV1Interface]
	policyV1beta1                 lazy[policyv1beta1.PolicyV1beta1Interface]
	rbacV1                        lazy[rbacv1.RbacV1Interface]
	rbacV1beta1                   lazy[rbacv1beta1.RbacV1beta1Interface]
	rbacV1alpha1                  lazy[rbacv1alpha1.RbacV1alpha1Interface]
	resourceV1                    lazy[resourcev1.ResourceV1Interface]
	resourceV1beta2               lazy[resourcev1beta2.ResourceV1beta2Interface]
	resourceV1beta1               lazy[resourcev1beta1.ResourceV1beta1Interface]
	resourceV1alpha3              lazy[resourcev1alpha3.ResourceV1alpha3Interface]
	schedulingV1alpha3            lazy[schedulingv1alpha3.SchedulingV1alpha3Interface]
	schedulingV1beta1             lazy[schedulingv1beta1.SchedulingV1beta1Interface]
	schedulingV1                  lazy[schedulingv1.SchedulingV1Interface]
	storageV1beta1                lazy[storagev1beta1.StorageV1beta1Interface]
	storageV1                     lazy[storagev1.StorageV1Interface]
	storageV1alpha1               lazy[storagev1alpha1.StorageV1alpha1Interface]
	storagemigrationV1            lazy[storagemigrationv1.StoragemigrationV1Interface]
	storagemigrationV1beta1       lazy[storagemigrationv1beta1.StoragemigrationV1beta1Interface]
}

var _ kubernetes.Interface = (*lazyClientset)(nil)

// newLazyClientset checks config by building the core/v1 client (every
// group's client is built from the same config, so none of the others can
// fail where that one did not) and gives the clientset one rate limiter
// for config's QPS and burst, as kubernetes.NewForConfigAndClient.
func newLazyClientset(config *rest.Config, h *http.Client) (*lazyClientset, error) {
	c := &lazyClientset{config: *config, http: h}
	if c.config.RateLimiter == nil && c.config.QPS > 0 {
		if c.config.Burst <= 0 {
			return nil, fmt.Errorf("burst is required to be greater than 0 when RateLimiter is not set and QPS is set to greater than 0")
		}
		c.config.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.config.QPS, c.config.Burst)
	}
	core, err := corev1.NewForConfigAndClient(&c.config, h)
	if err != nil {
		return nil, err
	}
	c.coreV1.once.Do(func() { c.coreV1.v = core })
	return c, nil
}

// lazy is one group client, built once.
type lazy[T any] struct {
	once sync.Once
	v    T
}

// group returns l's client, building it with newFn on first use. newFn
// cannot fail for a config newLazyClientset accepted; if it does, that is
// a defect, and group panics naming the client.
func group[T, C any](c *lazyClientset, l *lazy[T], newFn func(*rest.Config, *http.Client) (C, error)) T {
	l.once.Do(func() {
		v, err := newFn(&c.config, c.http)
		if err != nil {
			panic(fmt.Sprintf("build the %T client from a config its core/v1 client was built from: %v", v, err))
		}
		l.v = any(v).(T)
	})
	return l.v
}

// Discovery returns the discovery client, built on first use.
func (c *lazyClientset) Discovery() discovery.DiscoveryInterfaces {
	return group(c, &c.discovery, discovery.NewDiscoveryClientForConfigAndClient)
}

// AdmissionregistrationV1 returns the admissionregistrationv1 client, built on first use.
func (c *lazyClientset) AdmissionregistrationV1() admissionregistrationv1.AdmissionregistrationV1Interface {
	return group(c, &c.admissionregistrationV1, admissionregistrationv1.NewForConfigAndClient)
}

// AdmissionregistrationV1alpha1 returns the admissionregistrationv1alpha1 client, built on first use.
func (c *lazyClientset) AdmissionregistrationV1alpha1() admissionregistrationv1alpha1.AdmissionregistrationV1alpha1Interface {
	return group(c, &c.admissionregistrationV1alpha1, admissionregistrationv1alpha1.NewForConfigAndClient)
}

// AdmissionregistrationV1beta1 returns the admissionregistrationv1beta1 client, built on first use.
func (c *lazyClientset) AdmissionregistrationV1beta1() admissionregistrationv1beta1.AdmissionregistrationV1beta1Interface {
	return group(c, &c.admissionregistrationV1beta1, admissionregistrationv1beta1.NewForConfigAndClient)
}

// InternalV1alpha1 returns the internalv1alpha1 client, built on first use.
func (c *lazyClientset) InternalV1alpha1() internalv1alpha1.InternalV1alpha1Interface {
	return group(c, &c.internalV1alpha1, internalv1alpha1.NewForConfigAndClient)
}

// AppsV1 returns the appsv1 client, built on first use.
func (c *lazyClientset) AppsV1() appsv1.AppsV1Interface {
	return group(c, &c.appsV1, appsv1.NewForConfigAndClient)
}

// AppsV1beta1 returns the appsv1beta1 client, built on first use.
func (c *lazyClientset) AppsV1beta1() appsv1beta1.AppsV1beta1Interface {
	return group(c, &c.appsV1beta1, appsv1beta1.NewForConfigAndClient)
}

// AppsV1beta2 returns the appsv1beta2 client, built on first use.
func (c *lazyClientset) AppsV1beta2() appsv1beta2.AppsV1beta2Interface {
	return group(c, &c.appsV1beta2, appsv1beta2.NewForConfigAndClient)
}

// AuthenticationV1 returns the authenticationv1 client, built on first use.
func (c *lazyClientset) AuthenticationV1() authenticationv1.AuthenticationV1Interface {
	return group(c, &c.authenticationV1, authenticationv1.NewForConfigAndClient)
}

// AuthenticationV1alpha1 returns the authenticationv1alpha1 client, built on first use.
func (c *lazyClientset) AuthenticationV1alpha1() authenticationv1alpha1.AuthenticationV1alpha1Interface {
	return group(c, &c.authenticationV1alpha1, authenticationv1alpha1.NewForConfigAndClient)
}

// AuthenticationV1beta1 returns the authenticationv1beta1 client, built on first use.
func (c *lazyClientset) AuthenticationV1beta1() authenticationv1beta1.AuthenticationV1beta1Interface {
	return group(c, &c.authenticationV1beta1, authenticationv1beta1.NewForConfigAndClient)
}

// AuthorizationV1 returns the authorizationv1 client, built on first use.
func (c *lazyClientset) AuthorizationV1() authorizationv1.AuthorizationV1Interface {
	return group(c, &c.authorizationV1, authorizationv1.NewForConfigAndClient)
}

// AuthorizationV1beta1 returns the authorizationv1beta1 client, built on first use.
func (c *lazyClientset) AuthorizationV1beta1() authorizationv1beta1.AuthorizationV1beta1Interface {
	return group(c, &c.authorizationV1beta1, authorizationv1beta1.NewForConfigAndClient)
}

// AutoscalingV1 returns the autoscalingv1 client, built on first use.
func (c *lazyClientset) AutoscalingV1() autoscalingv1.AutoscalingV1Interface {
	return group(c, &c.autoscalingV1, autoscalingv1.NewForConfigAndClient)
}

// AutoscalingV2 returns the autoscalingv2 client, built on first use.
func (c *lazyClientset) AutoscalingV2() autoscalingv2.AutoscalingV2Interface {
	return group(c, &c.autoscalingV2, autoscalingv2.NewForConfigAndClient)
}

// BatchV1 returns the batchv1 client, built on first use.
func (c *lazyClientset) BatchV1() batchv1.BatchV1Interface {
	return group(c, &c.batchV1, batchv1.NewForConfigAndClient)
}

// BatchV1beta1 returns the batchv1beta1 client, built on first use.
func (c *lazyClientset) BatchV1beta1() batchv1beta1.BatchV1beta1Interface {
	return group(c, &c.batchV1beta1, batchv1beta1.NewForConfigAndClient)
}

// CertificatesV1 returns the certificatesv1 client, built on first use.
func (c *lazyClientset) CertificatesV1() certificatesv1.CertificatesV1Interface {
	return group(c, &c.certificatesV1, certificatesv1.NewForConfigAndClient)
}

// CertificatesV1beta1 returns the certificatesv1beta1 client, built on first use.
func (c *lazyClientset) CertificatesV1beta1() certificatesv1beta1.CertificatesV1beta1Interface {
	return group(c, &c.certificatesV1beta1, certificatesv1beta1.NewForConfigAndClient)
}

// CertificatesV1alpha1 returns the certificatesv1alpha1 client, built on first use.
func (c *lazyClientset) CertificatesV1alpha1() certificatesv1alpha1.CertificatesV1alpha1Interface {
	return group(c, &c.certificatesV1alpha1, certificatesv1alpha1.NewForConfigAndClient)
}

// CoordinationV1alpha2 returns the coordinationv1alpha2 client, built on first use.
func (c *lazyClientset) CoordinationV1alpha2() coordinationv1alpha2.CoordinationV1alpha2Interface {
	return group(c, &c.coordinationV1alpha2, coordinationv1alpha2.NewForConfigAndClient)
}

// CoordinationV1beta1 returns the coordinationv1beta1 client, built on first use.
func (c *lazyClientset) CoordinationV1beta1() coordinationv1beta1.CoordinationV1beta1Interface {
	return group(c, &c.coordinationV1beta1, coordinationv1beta1.NewForConfigAndClient)
}

// CoordinationV1 returns the coordinationv1 client, built on first use.
func (c *lazyClientset) CoordinationV1() coordinationv1.CoordinationV1Interface {
	return group(c, &c.coordinationV1, coordinationv1.NewForConfigAndClient)
}

// CoreV1 returns the corev1 client, built on first use.
func (c *lazyClientset) CoreV1() corev1.CoreV1Interface {
	return group(c, &c.coreV1, corev1.NewForConfigAndClient)
}

// DiscoveryV1 returns the discoveryv1 client, built on first use.
func (c *lazyClientset) DiscoveryV1() discoveryv1.DiscoveryV1Interface {
	return group(c, &c.discoveryV1, discoveryv1.NewForConfigAndClient)
}

// DiscoveryV1beta1 returns the discoveryv1beta1 client, built on first use.
func (c *lazyClientset) DiscoveryV1beta1() discoveryv1beta1.DiscoveryV1beta1Interface {
	return group(c, &c.discoveryV1beta1, discoveryv1beta1.NewForConfigAndClient)
}

// EventsV1 returns the eventsv1 client, built on first use.
func (c *lazyClientset) EventsV1() eventsv1.EventsV1Interface {
	return group(c, &c.eventsV1, eventsv1.NewForConfigAndClient)
}

// EventsV1beta1 returns the eventsv1beta1 client, built on first use.
func (c *lazyClientset) EventsV1beta1() eventsv1beta1.EventsV1beta1Interface {
	return group(c, &c.eventsV1beta1, eventsv1beta1.NewForConfigAndClient)
}

// ExtensionsV1beta1 returns the extensionsv1beta1 client, built on first use.
func (c *lazyClientset) ExtensionsV1beta1() extensionsv1beta1.ExtensionsV1beta1Interface {
	return group(c, &c.extensionsV1beta1, extensionsv1beta1.NewForConfigAndClient)
}

// FlowcontrolV1 returns the flowcontrolv1 client, built on first use.
func (c *lazyClientset) FlowcontrolV1() flowcontrolv1.FlowcontrolV1Interface {
	return group(c, &c.flowcontrolV1, flowcontrolv1.NewForConfigAndClient)
}

// FlowcontrolV1beta1 returns the flowcontrolv1beta1 client, built on first use.
func (c *lazyClientset) FlowcontrolV1beta1() flowcontrolv1beta1.FlowcontrolV1beta1Interface {
	return group(c, &c.flowcontrolV1beta1, flowcontrolv1beta1.NewForConfigAndClient)
}

// FlowcontrolV1beta2 returns the flowcontrolv1beta2 client, built on first use.
func (c *lazyClientset) FlowcontrolV1beta2() flowcontrolv1beta2.FlowcontrolV1beta2Interface {
	return group(c, &c.flowcontrolV1beta2, flowcontrolv1beta2.NewForConfigAndClient)
}

// FlowcontrolV1beta3 returns the flowcontrolv1beta3 client, built on first use.
func (c *lazyClientset) FlowcontrolV1beta3() flowcontrolv1beta3.FlowcontrolV1beta3Interface {
	return group(c, &c.flowcontrolV1beta3, flowcontrolv1beta3.NewForConfigAndClient)
}

// LifecycleV1alpha1 returns the lifecyclev1alpha1 client, built on first use.
func (c *lazyClientset) LifecycleV1alpha1() lifecyclev1alpha1.LifecycleV1alpha1Interface {
	return group(c, &c.lifecycleV1alpha1, lifecyclev1alpha1.NewForConfigAndClient)
}

// NetworkingV1 returns the networkingv1 client, built on first use.
func (c *lazyClientset) NetworkingV1() networkingv1.NetworkingV1Interface {
	return group(c, &c.networkingV1, networkingv1.NewForConfigAndClient)
}

// NetworkingV1beta1 returns the networkingv1beta1 client, built on first use.
func (c *lazyClientset) NetworkingV1beta1() networkingv1beta1.NetworkingV1beta1Interface {
	return group(c, &c.networkingV1beta1, networkingv1beta1.NewForConfigAndClient)
}

// NodeV1 returns the nodev1 client, built on first use.
func (c *lazyClientset) NodeV1() nodev1.NodeV1Interface {
	return group(c, &c.nodeV1, nodev1.NewForConfigAndClient)
}

// NodeV1alpha1 returns the nodev1alpha1 client, built on first use.
func (c *lazyClientset) NodeV1alpha1() nodev1alpha1.NodeV1alpha1Interface {
	return group(c, &c.nodeV1alpha1, nodev1alpha1.NewForConfigAndClient)
}

// NodeV1beta1 returns the nodev1beta1 client, built on first use.
func (c *lazyClientset) NodeV1beta1() nodev1beta1.NodeV1beta1Interface {
	return group(c, &c.nodeV1beta1, nodev1beta1.NewForConfigAndClient)
}

// PolicyV1 returns the policyv1 client, built on first use.
func (c *lazyClientset) PolicyV1() policyv1.PolicyV1Interface {
	return group(c, &c.policyV1, policyv1.NewForConfigAndClient)
}

// PolicyV1beta1 returns the policyv1beta1 client, built on first use.
func (c *lazyClientset) PolicyV1beta1() policyv1beta1.PolicyV1beta1Interface {
	return group(c, &c.policyV1beta1, policyv1beta1.NewForConfigAndClient)
}

// RbacV1 returns the rbacv1 client, built on first use.
func (c *lazyClientset) RbacV1() rbacv1.RbacV1Interface {
	return group(c, &c.rbacV1, rbacv1.NewForConfigAndClient)
}

// RbacV1beta1 returns the rbacv1beta1 client, built on first use.
func (c *lazyClientset) RbacV1beta1() rbacv1beta1.RbacV1beta1Interface {
	return group(c, &c.rbacV1beta1, rbacv1beta1.NewForConfigAndClient)
}

// RbacV1alpha1 returns the rbacv1alpha1 client, built on first use.
func (c *lazyClientset) RbacV1alpha1() rbacv1alpha1.RbacV1alpha1Interface {
	return group(c, &c.rbacV1alpha1, rbacv1alpha1.NewForConfigAndClient)
}

// ResourceV1 returns the resourcev1 client, built on first use.
func (c *lazyClientset) ResourceV1() resourcev1.ResourceV1Interface {
	return group(c, &c.resourceV1, resourcev1.NewForConfigAndClient)
}

// ResourceV1beta2 returns the resourcev1beta2 client, built on first use.
func (c *lazyClientset) ResourceV1beta2() resourcev1beta2.ResourceV1beta2Interface {
	return group(c, &c.resourceV1beta2, resourcev1beta2.NewForConfigAndClient)
}

// ResourceV1beta1 returns the resourcev1beta1 client, built on first use.
func (c *lazyClientset) ResourceV1beta1() resourcev1beta1.ResourceV1beta1Interface {
	return group(c, &c.resourceV1beta1, resourcev1beta1.NewForConfigAndClient)
}

// ResourceV1alpha3 returns the resourcev1alpha3 client, built on first use.
func (c *lazyClientset) ResourceV1alpha3() resourcev1alpha3.ResourceV1alpha3Interface {
	return group(c, &c.resourceV1alpha3, resourcev1alpha3.NewForConfigAndClient)
}

// SchedulingV1alpha3 returns the schedulingv1alpha3 client, built on first use.
func (c *lazyClientset) SchedulingV1alpha3() schedulingv1alpha3.SchedulingV1alpha3Interface {
	return group(c, &c.schedulingV1alpha3, schedulingv1alpha3.NewForConfigAndClient)
}

// SchedulingV1beta1 returns the schedulingv1beta1 client, built on first use.
func (c *lazyClientset) SchedulingV1beta1() schedulingv1beta1.SchedulingV1beta1Interface {
	return group(c, &c.schedulingV1beta1, schedulingv1beta1.NewForConfigAndClient)
}

// SchedulingV1 returns the schedulingv1 client, built on first use.
func (c *lazyClientset) SchedulingV1() schedulingv1.SchedulingV1Interface {
	return group(c, &c.schedulingV1, schedulingv1.NewForConfigAndClient)
}

// StorageV1beta1 returns the storagev1beta1 client, built on first use.
func (c *lazyClientset) StorageV1beta1() storagev1beta1.StorageV1beta1Interface {
	return group(c, &c.storageV1beta1, storagev1beta1.NewForConfigAndClient)
}

// StorageV1 returns the storagev1 client, built on first use.
func (c *lazyClientset) StorageV1() storagev1.StorageV1Interface {
	return group(c, &c.storageV1, storagev1.NewForConfigAndClient)
}

// StorageV1alpha1 returns the storagev1alpha1 client, built on first use.
func (c *lazyClientset) StorageV1alpha1() storagev1alpha1.StorageV1alpha1Interface {
	return group(c, &c.storageV1alpha1, storagev1alpha1.NewForConfigAndClient)
}

// StoragemigrationV1 returns the storagemigrationv1 client, built on first use.
func (c *lazyClientset) StoragemigrationV1() storagemigrationv1.StoragemigrationV1Interface {
	return group(c, &c.storagemigrationV1, storagemigrationv1.NewForConfigAndClient)
}

// StoragemigrationV1beta1 returns the storagemigrationv1beta1 client, built on first use.
func (c *lazyClientset) StoragemigrationV1beta1() storagemigrationv1beta1.StoragemigrationV1beta1Interface {
	return group(c, &c.storagemigrationV1beta1, storagemigrationv1beta1.NewForConfigAndClient)
}
