package manifests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// checks are every check a build must pass.
var checks = map[string]func(*Objects) error{
	"containers": checkContainers,
	"env":        checkEnv,
	"defaults":   checkDefaults,
	"grace":      checkGrace,
	"budget":     func(o *Objects) error { _, err := checkBudget(o); return err },
	"scalers":    checkScalers,
	"monitoring": checkMonitoring,
	"network":    checkNetwork,
	"migrate":    checkMigrateStep,
}

func TestBuildsPassEveryCheck(t *testing.T) {
	for _, dir := range builds {
		t.Run(dir, func(t *testing.T) {
			o := decoded(t, dir)
			for name, check := range checks {
				require.NoError(t, check(o), "check %s", name)
			}
			lines, err := checkBudget(o)
			require.NoError(t, err)
			total := 0
			for _, l := range lines {
				t.Logf("connections: %3d  %s", l.Conns, l.What)
				total += l.Conns
			}
			t.Logf("connections: %3d  total, of max_connections %d", total, maxConnections)
		})
	}
}

// TestWorkerAutoscalersAgree: the HPA alternative scales production's
// workers within the ScaledObject's bounds.
func TestWorkerAutoscalersAgree(t *testing.T) {
	bounds := func(dir string) [2]int32 {
		o := decoded(t, dir)
		s, err := o.scaler(o.deployment("holdfast-worker"))
		require.NoError(t, err)
		return [2]int32{s.Min, s.Max}
	}
	require.Equal(t, bounds("overlays/production"), bounds("overlays/production-hpa-external"))
}

func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := Generate(root)
	require.NoError(t, err)
	require.NoError(t, sameFiles(filepath.Join(root, GeneratedDir), files), "run make manifests")

	t.Run("control: a stale file is found", func(t *testing.T) {
		dir := t.TempDir()
		for _, f := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644))
		}
		require.NoError(t, sameFiles(dir, files))
		stale := bytes.Replace(files[0].Data, []byte("for: 2m"), []byte("for: 3m"), 1)
		require.NotEqual(t, files[0].Data, stale)
		require.NoError(t, os.WriteFile(filepath.Join(dir, files[0].Name), stale, 0o644))
		require.ErrorContains(t, sameFiles(dir, files), files[0].Name)
	})
}

// sameFiles reports whether dir holds exactly files.
func sameFiles(dir string, files []File) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	want := map[string][]byte{}
	for _, f := range files {
		want[f.Name] = f.Data
	}
	var errs []error
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		w, ok := want[e.Name()]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: not generated", e.Name()))
		case !bytes.Equal(data, w):
			errs = append(errs, fmt.Errorf("%s: differs from what the generator writes", e.Name()))
		}
		delete(want, e.Name())
	}
	for name := range want {
		errs = append(errs, fmt.Errorf("%s: missing", name))
	}
	return errors.Join(errs...)
}

// TestConfigSettingsWalk: the reflect walk finds nested settings, and as
// many as the config package's files have env tags.
func TestConfigSettingsWalk(t *testing.T) {
	s := configSettings()
	require.Contains(t, s, "REDIS_SENTINEL_PASSWORD") // in config.Redis
	require.Equal(t, "20s", s["SHUTDOWN_TIMEOUT"].Default)
	files, err := filepath.Glob(filepath.Join(root, "config/*.go"))
	require.NoError(t, err)
	tags := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		tags += strings.Count(string(src), "`env:\"")
	}
	require.Equal(t, tags, len(s))
}

// control is a change to the production build that one check must reject.
type control struct {
	name  string
	raw   func(objs []map[string]any) // before decoding
	typed func(o *Objects)            // after decoding
	check string                      // the check that must fail; "" for decoding
	want  string                      // in its error
}

var controls = []control{
	{name: "misspelled field", raw: func(objs []map[string]any) {
		spec(find(objs, "Deployment", "holdfast-api"))["minReadySecond"] = 45
	}, want: "unknown field"},
	{name: "field in the wrong case", raw: func(objs []map[string]any) {
		s := spec(find(objs, "Deployment", "holdfast-api"))
		s["MinReadySeconds"] = s["minReadySeconds"]
		delete(s, "minReadySeconds")
	}, want: "unknown field"},
	{name: "misspelled field of a container", raw: func(objs []map[string]any) {
		c := container(find(objs, "Deployment", "holdfast-worker"))
		c["livenesProbe"] = c["livenessProbe"]
	}, want: "unknown field"},
	{name: "misspelled ScaledObject field", raw: func(objs []map[string]any) {
		spec(find(objs, "ScaledObject", "holdfast-worker"))["maxReplicaCont"] = 4
	}, want: "unknown field"},
	{name: "misspelled PrometheusRule field", raw: func(objs []map[string]any) {
		group := spec(find(objs, "PrometheusRule", "holdfast"))["groups"].([]any)[0].(map[string]any)
		group["rules"].([]any)[0].(map[string]any)["expresion"] = "up"
	}, want: "unknown field"},
	{name: "unknown kind", raw: func(objs []map[string]any) {
		find(objs, "ServiceAccount", "holdfast")["kind"] = "ServiceAcount"
	}, want: "unknown kind"},

	{name: "API without readiness probe", typed: func(o *Objects) {
		o.container("holdfast-api").ReadinessProbe = nil
	}, check: "containers", want: "no readiness probe on /readyz"},
	{name: "worker without liveness probe", typed: func(o *Objects) {
		o.container("holdfast-worker").LivenessProbe = nil
	}, check: "containers", want: "no liveness probe on /healthz"},
	{name: "probe on an undeclared port", typed: func(o *Objects) {
		o.container("holdfast-api").LivenessProbe.HTTPGet.Port = intstr.FromInt32(9999)
	}, check: "containers", want: "which it does not declare"},
	{name: "no memory limit", typed: func(o *Objects) {
		delete(o.container("holdfast-worker").Resources.Limits, corev1.ResourceMemory)
	}, check: "containers", want: "no memory request and limit"},
	{name: "root user", typed: func(o *Objects) {
		root := int64(0)
		o.deployment("holdfast-api").Spec.Template.Spec.SecurityContext.RunAsUser = &root
		o.container("holdfast-api").SecurityContext.RunAsUser = &root
	}, check: "containers", want: "runAsUser is 0"},
	{name: "writable root filesystem", typed: func(o *Objects) {
		o.jobContainer().SecurityContext.ReadOnlyRootFilesystem = nil
	}, check: "containers", want: "readOnlyRootFilesystem is not true"},
	{name: "a shell", typed: func(o *Objects) {
		o.container("holdfast-api").Command = []string{"sh", "-c", "exec /api"}
	}, check: "containers", want: "it has no shell"},

	{name: "env name not in config", typed: func(o *Objects) {
		c := o.container("holdfast-api")
		c.Env = append(c.Env, corev1.EnvVar{Name: "JWT_SECERT", Value: "x"})
	}, check: "env", want: "JWT_SECERT is no setting"},
	{name: "ConfigMap key not in config", typed: func(o *Objects) {
		o.configMapOf("holdfast").Data["POLL_MAX_WIAT"] = "30s"
	}, check: "env", want: "POLL_MAX_WIAT is no setting"},
	{name: "secret in a ConfigMap", typed: func(o *Objects) {
		o.configMapOf("holdfast").Data["JWT_SECRET"] = "in the repository"
	}, check: "env", want: "JWT_SECRET is a secret"},
	{name: "envFrom a Secret", typed: func(o *Objects) {
		c := o.container("holdfast-worker")
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "holdfast"}}})
	}, check: "env", want: "its keys cannot be checked"},
	{name: "setting in no ConfigMap", typed: func(o *Objects) {
		delete(o.configMapOf("holdfast").Data, "LEASE_TTL")
	}, check: "env", want: "setting LEASE_TTL is in no ConfigMap"},
	{name: "setting the binary refuses", typed: func(o *Objects) {
		o.configMapOf("holdfast-worker").Data["PG_MAX_CONNS"] = "1"
	}, check: "env", want: "PG_MAX_CONNS must be at least 2"},
	{name: "value not the default", typed: func(o *Objects) {
		o.configMapOf("holdfast").Data["BATCH_MAX"] = "512"
	}, check: "defaults", want: "BATCH_MAX=\"512\", not the default"},

	{name: "API grace shorter than its stop", typed: func(o *Objects) {
		g := int64(30)
		o.deployment("holdfast-api").Spec.Template.Spec.TerminationGracePeriodSeconds = &g
	}, check: "grace", want: "needs at least 35s"},
	{name: "API grace shorter than a longer drain delay", typed: func(o *Objects) {
		o.configMapOf("holdfast").Data["SHUTDOWN_DRAIN_DELAY"] = "20s"
	}, check: "grace", want: "needs at least 50s"},
	{name: "API without preStop", typed: func(o *Objects) {
		o.container("holdfast-api").Lifecycle = nil
	}, check: "grace", want: "no preStop sleep"},
	{name: "worker grace shorter than SHUTDOWN_TIMEOUT", typed: func(o *Objects) {
		g := int64(20)
		o.deployment("holdfast-worker").Spec.Template.Spec.TerminationGracePeriodSeconds = &g
	}, check: "grace", want: "needs at least 30s"},

	{name: "budget over 100: larger worker pools", typed: func(o *Objects) {
		o.configMapOf("holdfast-worker").Data["PG_MAX_CONNS"] = "10"
	}, check: "budget", want: "connection budget 110 over max_connections 100"},
	{name: "budget over 100: more APIs", typed: func(o *Objects) {
		o.hpa("holdfast-api").Spec.MaxReplicas = 7
	}, check: "budget", want: "connection budget 108 over max_connections 100"},
	{name: "rollout faster than a pod stops", typed: func(o *Objects) {
		o.deployment("holdfast-worker").Spec.MinReadySeconds = 0
	}, check: "budget", want: "minReadySeconds 0 below the grace period"},
	{name: "scale-down of many pods at once", typed: func(o *Objects) {
		o.scaledObject().Spec.Advanced.HorizontalPodAutoscalerConfig.Behavior.ScaleDown.Policies[0].Value = 4
	}, check: "budget", want: "want at most 1 pod per 40 s"},

	{name: "workers scaled to zero", typed: func(o *Objects) {
		zero := int32(0)
		o.scaledObject().Spec.MinReplicaCount = &zero
	}, check: "scalers", want: "want 1 ≤ min ≤ max"},
	{name: "two autoscalers of the workers", typed: func(o *Objects) {
		h := o.hpa("holdfast-api").DeepCopy()
		h.Name, h.Spec.ScaleTargetRef.Name = "holdfast-worker", "holdfast-worker"
		o.HPAs = append(o.HPAs, h)
	}, check: "scalers", want: "2 autoscalers"},
	{name: "query of another namespace", typed: func(o *Objects) {
		t := &o.scaledObject().Spec.Triggers[0]
		t.Metadata["query"] = strings.Replace(t.Metadata["query"], `namespace="holdfast"`, `namespace="staging"`, 1)
	}, check: "scalers", want: "must select namespace=\"holdfast\""},
	{name: "query of other queues", typed: func(o *Objects) {
		t := &o.scaledObject().Spec.Triggers[1]
		t.Metadata["query"] = strings.Replace(t.Metadata["query"], `queue=~"events|probe|shop|stays"`, `queue=~"events|maintenance|probe|shop|stays"`, 1)
	}, check: "scalers", want: "must select queue=~"},

	{name: "alert rule changed", typed: func(o *Objects) {
		o.PrometheusRules[0].Spec.Groups[0].Rules[0].Labels["severity"] = "page"
	}, check: "monitoring", want: "not dashboards/alerts.yml's"},
	{name: "dashboard changed", typed: func(o *Objects) {
		cm := o.configMapOf("holdfast-dashboard")
		cm.Data["holdfast.json"] = strings.Replace(cm.Data["holdfast.json"], `"uid": "holdfast"`, `"uid": "other"`, 1)
	}, check: "monitoring", want: "not dashboards/holdfast.json"},
	{name: "worker Service renamed", typed: func(o *Objects) {
		for _, s := range o.Services {
			if s.Name == "holdfast-worker" {
				s.Name = "worker"
			}
		}
	}, check: "monitoring", want: "want the jobs of dashboards/prometheus.yml"},

	{name: "egress to another port", typed: func(o *Objects) {
		np := o.networkPolicy("holdfast-worker")
		port := intstr.FromInt32(80)
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}})
	}, check: "network", want: "egress to port 80"},
	{name: "Job without a network policy", typed: func(o *Objects) {
		np := o.networkPolicy("holdfast-migrate")
		np.Spec.PodSelector.MatchLabels = map[string]string{"app.kubernetes.io/name": "nothing"}
	}, check: "network", want: "Job/holdfast-migrate: its pods need a NetworkPolicy"},

	{name: "migration step without its ConfigMap", typed: func(o *Objects) {
		delete(o.configMapOf("holdfast").Labels, migrateLabel)
	}, check: "migrate", want: "label holdfast/migrate=true missing"},
	{name: "migration step with a Deployment", typed: func(o *Objects) {
		o.deployment("holdfast-worker").Labels[migrateLabel] = "true"
	}, check: "migrate", want: "Deployment/holdfast-worker: label holdfast/migrate=true on what"},
}

// TestControls: each check rejects a build changed to break what it
// checks, so that none passes for want of looking.
func TestControls(t *testing.T) {
	objs, err := productionJSON(t)
	require.NoError(t, err)
	for _, c := range controls {
		t.Run(c.name, func(t *testing.T) {
			raw := mutate(t, objs, c.raw)
			if c.check == "" {
				_, err := decode(raw)
				require.ErrorContains(t, err, c.want)
				return
			}
			check := checks[c.check]
			require.NotNil(t, check, c.check)
			o, err := decode(raw)
			require.NoError(t, err)
			require.NoError(t, check(o), "unchanged")
			c.typed(o)
			require.ErrorContains(t, check(o), c.want)
		})
	}
}

func productionJSON(t *testing.T) ([][]byte, error) {
	t.Helper()
	return build(t, "overlays/production"), nil
}

// mutate copies objs and applies f to the copies (f may be nil).
func mutate(t *testing.T, objs [][]byte, f func([]map[string]any)) [][]byte {
	t.Helper()
	if f == nil {
		return objs
	}
	maps := make([]map[string]any, len(objs))
	for i, j := range objs {
		require.NoError(t, json.Unmarshal(j, &maps[i]))
	}
	f(maps)
	out := make([][]byte, len(maps))
	for i, m := range maps {
		j, err := json.Marshal(m)
		require.NoError(t, err)
		out[i] = j
	}
	return out
}

func find(objs []map[string]any, kind, name string) map[string]any {
	for _, o := range objs {
		if o["kind"] == kind && o["metadata"].(map[string]any)["name"] == name {
			return o
		}
	}
	panic(fmt.Sprintf("no %s %s in the build", kind, name))
}

func spec(o map[string]any) map[string]any { return o["spec"].(map[string]any) }

func container(deployment map[string]any) map[string]any {
	pod := spec(deployment)["template"].(map[string]any)["spec"].(map[string]any)
	return pod["containers"].([]any)[0].(map[string]any)
}

func (o *Objects) deployment(name string) *appsv1.Deployment {
	for _, d := range o.Deployments {
		if d.Name == name {
			return d
		}
	}
	panic("no Deployment " + name)
}

func (o *Objects) container(deployment string) *corev1.Container {
	return &o.deployment(deployment).Spec.Template.Spec.Containers[0]
}

func (o *Objects) jobContainer() *corev1.Container {
	return &o.Jobs[0].Spec.Template.Spec.Containers[0]
}

// configMapOf is the ConfigMap the generator named base (with its hash).
func (o *Objects) configMapOf(base string) *corev1.ConfigMap {
	for _, cm := range o.ConfigMaps {
		if cm.Name == base || strings.HasPrefix(cm.Name, base+"-") && len(cm.Name) == len(base)+11 {
			return cm
		}
	}
	panic("no ConfigMap " + base)
}

func (o *Objects) hpa(name string) *autoscalingv2.HorizontalPodAutoscaler {
	for _, h := range o.HPAs {
		if h.Name == name {
			return h
		}
	}
	panic("no HorizontalPodAutoscaler " + name)
}

func (o *Objects) scaledObject() *ScaledObject { return o.ScaledObjects[0] }

func (o *Objects) networkPolicy(name string) *networkingv1.NetworkPolicy {
	for _, np := range o.NetworkPolicies {
		if np.Name == name {
			return np
		}
	}
	panic("no NetworkPolicy " + name)
}

// TestBlockScalar: the dashboard's YAML reads back as the file, whether it
// fits a literal block or not.
func TestBlockScalar(t *testing.T) {
	for _, s := range []string{"{\n  \"a\": 1\n}\n", "{\n\n}\n", "{}", "{\n}\n\n", "{\n\t\"a\": 1\n}\n", "a \n"} {
		y := "v: " + blockScalar(s, "  ")
		var got struct {
			V string `json:"v"`
		}
		require.NoError(t, yaml.UnmarshalStrict([]byte(y), &got), y)
		require.Equal(t, s, got.V, y)
	}
}
