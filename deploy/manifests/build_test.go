package manifests

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// builds are the kustomizations a user applies: the base, each overlay,
// and through production-hpa-external the worker-hpa-external component.
var builds = []string{"base", "overlays/production", "overlays/production-hpa-external"}

// build runs `kustomize build` on deploy/kubernetes/dir and returns each
// object as JSON.
func build(t *testing.T, dir string) [][]byte {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(root, "deploy/kubernetes", dir))
	require.NoError(t, err, "kustomize build %s", dir)
	var out [][]byte
	for _, r := range m.Resources() {
		j, err := r.MarshalJSON()
		require.NoError(t, err)
		out = append(out, j)
	}
	require.NotEmpty(t, out, dir)
	return out
}

// Objects are a build's objects, each decoded into its type.
type Objects struct {
	Deployments     []*appsv1.Deployment
	Services        []*corev1.Service
	ConfigMaps      []*corev1.ConfigMap
	ServiceAccounts []*corev1.ServiceAccount
	Jobs            []*batchv1.Job
	PDBs            []*policyv1.PodDisruptionBudget
	HPAs            []*autoscalingv2.HorizontalPodAutoscaler
	NetworkPolicies []*networkingv1.NetworkPolicy
	ServiceMonitors []*monitoringv1.ServiceMonitor
	PrometheusRules []*monitoringv1.PrometheusRule
	ScaledObjects   []*ScaledObject
}

// ScaledObject is the part of KEDA's ScaledObject (keda.sh/v1alpha1) these
// manifests use. KEDA's own Go module brings in much of Kubernetes'
// controller machinery; decoded strictly, this struct still fails on any
// field outside it, and trigger metadata is checked against
// prometheusTriggerKeys.
type ScaledObject struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		Advanced        *struct {
			HorizontalPodAutoscalerConfig *struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type       string            `json:"type"`
			Name       string            `json:"name,omitempty"`
			MetricType string            `json:"metricType,omitempty"`
			Metadata   map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// prometheusTriggerKeys are the metadata keys of KEDA's prometheus scaler
// that the manifests may set.
var prometheusTriggerKeys = map[string]bool{
	"serverAddress": true, "query": true, "threshold": true, "activationThreshold": true,
	"ignoreNullValues": true, "unsafeSsl": true, "timeout": true,
}

// decode decodes every object strictly into the type of its apiVersion and
// kind: an unknown kind, an unknown or misspelled field (case included) or a
// repeated one fails.
func decode(objs [][]byte) (*Objects, error) {
	var o Objects
	for _, j := range objs {
		var tm metav1.TypeMeta
		if err := json.Unmarshal(j, &tm); err != nil {
			return nil, err
		}
		var v any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			v = add(&o.Deployments)
		case "v1 Service":
			v = add(&o.Services)
		case "v1 ConfigMap":
			v = add(&o.ConfigMaps)
		case "v1 ServiceAccount":
			v = add(&o.ServiceAccounts)
		case "batch/v1 Job":
			v = add(&o.Jobs)
		case "policy/v1 PodDisruptionBudget":
			v = add(&o.PDBs)
		case "autoscaling/v2 HorizontalPodAutoscaler":
			v = add(&o.HPAs)
		case "networking.k8s.io/v1 NetworkPolicy":
			v = add(&o.NetworkPolicies)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			v = add(&o.ServiceMonitors)
		case "monitoring.coreos.com/v1 PrometheusRule":
			v = add(&o.PrometheusRules)
		case "keda.sh/v1alpha1 ScaledObject":
			v = add(&o.ScaledObjects)
		default:
			return nil, fmt.Errorf("unknown kind %q of apiVersion %q", tm.Kind, tm.APIVersion)
		}
		if err := strictJSON(j, v); err != nil {
			return nil, fmt.Errorf("%s: %w", tm.Kind, err)
		}
	}
	return &o, nil
}

// add appends a new T to *list and returns it.
func add[T any](list *[]*T) *T {
	v := new(T)
	*list = append(*list, v)
	return v
}

// decoded builds dir and decodes it, failing the test on an error.
func decoded(t *testing.T, dir string) *Objects {
	t.Helper()
	o, err := decode(build(t, dir))
	require.NoError(t, err, dir)
	return o
}
