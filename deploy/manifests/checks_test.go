package manifests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/holdfast/holdfast/config"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Component labels name what a workload runs.
const (
	componentLabel = "app.kubernetes.io/component"
	api, worker    = "api", "worker"
	migrate        = "migrate"
)

// workload is a Deployment's or a Job's pod template.
type workload struct {
	Kind, Name, Namespace, Component string
	Spec                             *corev1.PodSpec
	Deployment                       *appsv1.Deployment // nil for a Job
}

func (w workload) String() string { return w.Kind + "/" + w.Name }

func (o *Objects) workloads() []workload {
	var out []workload
	for _, d := range o.Deployments {
		out = append(out, workload{"Deployment", d.Name, d.Namespace, d.Spec.Template.Labels[componentLabel], &d.Spec.Template.Spec, d})
	}
	for _, j := range o.Jobs {
		out = append(out, workload{"Job", j.Name, j.Namespace, j.Spec.Template.Labels[componentLabel], &j.Spec.Template.Spec, nil})
	}
	return out
}

// images are the image each component runs (its name, whatever the
// registry, tag or digest an overlay sets) and its arguments.
var images = map[string]struct {
	Image string
	Args  []string
}{
	api:     {"holdfast/api", nil},
	worker:  {"holdfast/worker", nil},
	migrate: {"holdfast/api", []string{"migrate"}},
}

// imageName strips the tag or digest.
func imageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// checkContainers: every container runs its component's image and
// arguments without a shell, has CPU and memory requests and limits and the
// non-root context; the API has readiness on /readyz and liveness on
// /healthz, the worker liveness on /healthz.
func checkContainers(o *Objects) error {
	var errs []error
	for _, w := range o.workloads() {
		want, ok := images[w.Component]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: unknown %s %q", w, componentLabel, w.Component))
			continue
		}
		if len(w.Spec.Containers) != 1 {
			errs = append(errs, fmt.Errorf("%s: %d containers, want 1", w, len(w.Spec.Containers)))
		}
		for _, c := range slices.Concat(w.Spec.InitContainers, w.Spec.Containers) {
			where := fmt.Sprintf("%s container %s", w, c.Name)
			if n := imageName(c.Image); n != want.Image && !strings.HasSuffix(n, "/"+want.Image) {
				errs = append(errs, fmt.Errorf("%s: image %s, want %s", where, c.Image, want.Image))
			}
			if len(c.Command) > 0 {
				errs = append(errs, fmt.Errorf("%s: command %q: the image's entrypoint is the binary, and it has no shell", where, c.Command))
			}
			if !slices.Equal(c.Args, want.Args) {
				errs = append(errs, fmt.Errorf("%s: args %q, want %q", where, c.Args, want.Args))
			}
			errs = append(errs, checkResources(where, c.Resources), checkSecurity(where, w.Spec.SecurityContext, c.SecurityContext))
		}
		if len(w.Spec.Containers) > 0 {
			errs = append(errs, checkProbes(w, w.Spec.Containers[0]))
		}
		if w.Spec.AutomountServiceAccountToken == nil || *w.Spec.AutomountServiceAccountToken {
			errs = append(errs, fmt.Errorf("%s: mounts a service account token; holdfast calls no Kubernetes API", w))
		}
		if w.Spec.EnableServiceLinks == nil || *w.Spec.EnableServiceLinks {
			errs = append(errs, fmt.Errorf("%s: enableServiceLinks would add environment variables holdfast does not read", w))
		}
	}
	return errors.Join(errs...)
}

func checkResources(where string, r corev1.ResourceRequirements) error {
	var errs []error
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := r.Requests[name], r.Limits[name]
		switch {
		case req.IsZero() || lim.IsZero():
			errs = append(errs, fmt.Errorf("%s: no %s request and limit", where, name))
		case req.Cmp(lim) > 0:
			errs = append(errs, fmt.Errorf("%s: %s request %s above its limit %s", where, name, req.String(), lim.String()))
		}
	}
	return errors.Join(errs...)
}

// nonRootUID is the user the images run as.
const nonRootUID = 65532

// checkSecurity checks the container's effective context: its own fields,
// or the pod's where the container leaves them unset.
func checkSecurity(where string, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) error {
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	if c == nil {
		c = &corev1.SecurityContext{}
	}
	user := firstSet(c.RunAsUser, pod.RunAsUser)
	nonRoot := firstSet(c.RunAsNonRoot, pod.RunAsNonRoot)
	seccomp := firstSet(c.SeccompProfile, pod.SeccompProfile)
	var errs []error
	if nonRoot == nil || !*nonRoot {
		errs = append(errs, fmt.Errorf("%s: runAsNonRoot is not true", where))
	}
	if user == nil || *user != nonRootUID {
		errs = append(errs, fmt.Errorf("%s: runAsUser is %v, want %d", where, deref(user), nonRootUID))
	}
	if c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem {
		errs = append(errs, fmt.Errorf("%s: readOnlyRootFilesystem is not true", where))
	}
	if c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
		errs = append(errs, fmt.Errorf("%s: allowPrivilegeEscalation is not false", where))
	}
	if c.Privileged != nil && *c.Privileged {
		errs = append(errs, fmt.Errorf("%s: privileged", where))
	}
	if c.Capabilities == nil || !slices.Equal(c.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(c.Capabilities.Add) > 0 {
		errs = append(errs, fmt.Errorf("%s: capabilities must drop ALL and add none", where))
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		errs = append(errs, fmt.Errorf("%s: seccompProfile is not RuntimeDefault", where))
	}
	return errors.Join(errs...)
}

// firstSet is the first of a, b that is set.
func firstSet[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}

func checkProbes(w workload, c corev1.Container) error {
	want := map[string]map[string]string{ // component → probe → path
		api:    {"readiness": "/readyz", "liveness": "/healthz"},
		worker: {"readiness": "/readyz", "liveness": "/healthz"},
	}[w.Component]
	probes := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
	var errs []error
	for kind, path := range want {
		p := probes[kind]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path {
			errs = append(errs, fmt.Errorf("%s container %s: no %s probe on %s", w, c.Name, kind, path))
			continue
		}
		if !declaresPort(c, p.HTTPGet.Port) {
			errs = append(errs, fmt.Errorf("%s container %s: %s probe on port %s, which it does not declare", w, c.Name, kind, p.HTTPGet.Port.String()))
		}
	}
	return errors.Join(errs...)
}

func declaresPort(c corev1.Container, port intstr.IntOrString) bool {
	for _, p := range c.Ports {
		if port.Type == intstr.String && p.Name == port.StrVal || port.Type == intstr.Int && p.ContainerPort == port.IntVal {
			return true
		}
	}
	return false
}

// envVar is one variable of a container's environment: a value, or a
// reference to a key of a Secret.
type envVar struct {
	Value  string
	Secret *corev1.SecretKeySelector
}

// env is a container's environment as Kubernetes builds it: envFrom's
// ConfigMaps in order (a later one wins), then env.
func (o *Objects) env(namespace string, c corev1.Container) (map[string]envVar, error) {
	out := map[string]envVar{}
	var errs []error
	for _, from := range c.EnvFrom {
		switch {
		case from.SecretRef != nil:
			errs = append(errs, fmt.Errorf("envFrom Secret %s: its keys cannot be checked; reference each with secretKeyRef", from.SecretRef.Name))
		case from.ConfigMapRef != nil:
			cm := o.configMap(namespace, from.ConfigMapRef.Name)
			if cm == nil {
				errs = append(errs, fmt.Errorf("envFrom ConfigMap %s: not in the build", from.ConfigMapRef.Name))
				continue
			}
			for k, v := range cm.Data {
				out[from.Prefix+k] = envVar{Value: v}
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = envVar{Value: e.Value}
		case e.ValueFrom.SecretKeyRef != nil:
			out[e.Name] = envVar{Secret: e.ValueFrom.SecretKeyRef}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm := o.configMap(namespace, ref.Name)
			if cm == nil {
				errs = append(errs, fmt.Errorf("env %s: ConfigMap %s not in the build", e.Name, ref.Name))
				continue
			}
			out[e.Name] = envVar{Value: cm.Data[ref.Key]}
		default:
			errs = append(errs, fmt.Errorf("env %s: only values, ConfigMap and Secret keys are checked", e.Name))
		}
	}
	return out, errors.Join(errs...)
}

func (o *Objects) configMap(namespace, name string) *corev1.ConfigMap {
	for _, cm := range o.ConfigMaps {
		if cm.Namespace == namespace && cm.Name == name {
			return cm
		}
	}
	return nil
}

// containerConfig is the configuration w's container loads.
func (o *Objects) containerConfig(w workload) (config.Config, error) {
	if len(w.Spec.Containers) == 0 {
		return config.Config{}, fmt.Errorf("%s: no container", w)
	}
	env, err := o.env(w.Namespace, w.Spec.Containers[0])
	if err != nil {
		return config.Config{}, fmt.Errorf("%s: %w", w, err)
	}
	c, err := loadConfig(env)
	if err != nil {
		return config.Config{}, fmt.Errorf("%s: %w", w, err)
	}
	return c, nil
}

// checkEnv: every variable a container gets names a setting of the config
// package; secrets come from the Secret "holdfast" under
// their own name and never from a ConfigMap; every environment loads; the
// API and the worker see every setting.
func checkEnv(o *Objects) error {
	known := configSettings()
	var errs []error
	for _, w := range o.workloads() {
		for _, c := range w.Spec.Containers {
			env, err := o.env(w.Namespace, c)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s container %s: %w", w, c.Name, err))
			}
			for _, name := range sortedKeys(env) {
				v := env[name]
				_, isSetting := known[name]
				switch {
				case !isSetting:
					errs = append(errs, fmt.Errorf("%s container %s: %s is no setting of the config package", w, c.Name, name))
				case v.Secret == nil && secretSettings[name]:
					errs = append(errs, fmt.Errorf("%s container %s: %s is a secret; take it from the Secret", w, c.Name, name))
				case v.Secret != nil && (v.Secret.Name != "holdfast" || v.Secret.Key != name):
					errs = append(errs, fmt.Errorf("%s container %s: %s from Secret %s key %s, want Secret holdfast key %s", w, c.Name, name, v.Secret.Name, v.Secret.Key, name))
				case v.Secret != nil && !secretSettings[name]:
					errs = append(errs, fmt.Errorf("%s container %s: %s is not a secret; put it in the ConfigMap", w, c.Name, name))
				}
			}
			if w.Component == api || w.Component == worker {
				for _, name := range sortedKeys(known) {
					if _, ok := env[name]; !ok {
						errs = append(errs, fmt.Errorf("%s container %s: setting %s is in no ConfigMap and no Secret key", w, c.Name, name))
					}
				}
			}
		}
		if _, err := o.containerConfig(w); err != nil {
			errs = append(errs, fmt.Errorf("does not load: %w", err))
		}
	}
	for _, cm := range o.ConfigMaps {
		if strings.HasPrefix(cm.Name, "holdfast-dashboard") {
			continue
		}
		for _, k := range sortedKeys(cm.Data) {
			if secretSettings[k] {
				errs = append(errs, fmt.Errorf("ConfigMap %s: %s is a secret", cm.Name, k))
			}
		}
	}
	return errors.Join(errs...)
}

// checkDefaults: a ConfigMap's value is the config default, except for the
// settings in clusterValues.
func checkDefaults(o *Objects) error {
	known := configSettings()
	var errs []error
	for _, cm := range o.ConfigMaps {
		for _, k := range sortedKeys(cm.Data) {
			s, ok := known[k]
			if _, cluster := clusterValues[k]; !ok || cluster {
				continue
			}
			if cm.Data[k] != s.Default {
				errs = append(errs, fmt.Errorf("ConfigMap %s: %s=%q, not the default %q (or list it in clusterValues)", cm.Name, k, cm.Data[k], s.Default))
			}
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// How long the binaries take to stop beyond their settings.
const (
	// workerHealthShutdown: a worker (wiring.Worker.Run) closes its health server within 5 s
	// once its handlers are done.
	workerHealthShutdown = 5 * time.Second
	// stopMargin covers closing the stores and the process' exit.
	stopMargin = 5 * time.Second
)

// checkGrace: the API pauses in preStop, and its grace period covers that
// pause, SHUTDOWN_DRAIN_DELAY and SHUTDOWN_TIMEOUT (long polls and held
// waits are answered at once on shutdown: api.Server.waitTerminal); a
// worker's covers SHUTDOWN_TIMEOUT and its health server's close.
func checkGrace(o *Objects) error {
	var errs []error
	for _, w := range o.workloads() {
		if w.Deployment == nil {
			continue
		}
		cfg, err := o.containerConfig(w)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		grace := time.Duration(deref64(w.Spec.TerminationGracePeriodSeconds, 30)) * time.Second
		var need time.Duration
		switch w.Component {
		case api:
			c := w.Spec.Containers[0]
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
				errs = append(errs, fmt.Errorf("%s: no preStop sleep (the image has no shell)", w))
				continue
			}
			pause := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
			need = pause + cfg.ShutdownDrainDelay + cfg.ShutdownTimeout + stopMargin
		case worker:
			need = cfg.ShutdownTimeout + workerHealthShutdown + stopMargin
		}
		if grace < need {
			errs = append(errs, fmt.Errorf("%s: terminationGracePeriodSeconds %v, needs at least %v", w, grace, need))
		}
	}
	return errors.Join(errs...)
}

func deref64(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}

// The connection budget's fixed parts (README.md, "Connection budget").
const (
	maxConnections      = 100 // the Postgres the manifests are sized for
	superuserReserved   = 3   // superuser_reserved_connections' default
	operatorConnections = 5   // psql, backups, exporters
	// migrateConns: `api migrate` opens a pool of two (cmd/api), after
	// closing the one connection that created the database if missing.
	migrateConns = 2
	// stoppingPods per Deployment: one pod replaced by a rollout and one
	// removed by a scale-down may still hold their pools while the others
	// run. checkBudget checks the settings that bound them to that.
	stoppingPods = 2
)

// budgetLine is one part of the connection budget.
type budgetLine struct {
	What  string
	Conns int
}

// checkBudget computes the most Postgres connections the build can open at
// once and fails above maxConnections. A Deployment can have maxReplicas
// (its autoscaler's) + maxSurge pods running and stoppingPods stopping, each
// opening up to its PG_MAX_CONNS (storage.Open: one pool, no other
// connection); the bound on stopping pods holds while minReadySeconds and
// the autoscaler's scale-down step are no shorter than the grace period.
func checkBudget(o *Objects) ([]budgetLine, error) {
	var lines []budgetLine
	var errs []error
	for _, w := range o.workloads() {
		if w.Deployment == nil {
			p := int32(1)
			if j := o.job(w.Name); j != nil && j.Spec.Parallelism != nil {
				p = *j.Spec.Parallelism
			}
			if p != 1 {
				errs = append(errs, fmt.Errorf("%s: parallelism %d, want 1 (one migrator)", w, p))
			}
			lines = append(lines, budgetLine{fmt.Sprintf("%s: pool of %d", w, migrateConns), migrateConns})
			continue
		}
		line, err := o.deploymentBudget(w)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		lines = append(lines, line)
	}
	lines = append(lines, budgetLine{"superuser_reserved_connections", superuserReserved},
		budgetLine{"operators", operatorConnections})
	total := 0
	for _, l := range lines {
		total += l.Conns
	}
	if total > maxConnections {
		errs = append(errs, fmt.Errorf("connection budget %d over max_connections %d", total, maxConnections))
	}
	return lines, errors.Join(errs...)
}

func (o *Objects) job(name string) *batchv1.Job {
	for _, j := range o.Jobs {
		if j.Name == name {
			return j
		}
	}
	return nil
}

func (o *Objects) deploymentBudget(w workload) (budgetLine, error) {
	d := w.Deployment
	cfg, err := o.containerConfig(w)
	if err != nil {
		return budgetLine{}, err
	}
	s, err := o.scaler(d)
	if err != nil {
		return budgetLine{}, err
	}
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate == nil {
		return budgetLine{}, fmt.Errorf("%s: a RollingUpdate strategy with maxSurge is expected", w)
	}
	surge, err := intstr.GetScaledValueFromIntOrPercent(d.Spec.Strategy.RollingUpdate.MaxSurge, int(s.Max), true)
	if err != nil {
		return budgetLine{}, fmt.Errorf("%s: maxSurge: %w", w, err)
	}
	grace := int32(deref64(w.Spec.TerminationGracePeriodSeconds, 30))
	var errs []error
	if d.Spec.MinReadySeconds < grace {
		errs = append(errs, fmt.Errorf("%s: minReadySeconds %d below the grace period %d: a rollout could stop more than one pod at a time", w, d.Spec.MinReadySeconds, grace))
	}
	if err := slowScaleDown(s.Behavior, grace); err != nil {
		errs = append(errs, fmt.Errorf("%s: %s: %w", w, s.Name, err))
	}
	pods := int(s.Max) + surge + stoppingPods
	conns := pods * int(cfg.PGMaxConns)
	what := fmt.Sprintf("%s: (maxReplicas %d + maxSurge %d + stopping %d) × PG_MAX_CONNS %d", w, s.Max, surge, stoppingPods, cfg.PGMaxConns)
	return budgetLine{what, conns}, errors.Join(errs...)
}

// slowScaleDown checks that a scale-down removes one pod at a time, no
// more often than the grace period.
func slowScaleDown(b *autoscalingv2.HorizontalPodAutoscalerBehavior, grace int32) error {
	if b == nil || b.ScaleDown == nil || len(b.ScaleDown.Policies) == 0 {
		return fmt.Errorf("no scale-down policy: the default removes any number of pods at once")
	}
	for _, p := range b.ScaleDown.Policies {
		if p.Type != autoscalingv2.PodsScalingPolicy || p.Value > 1 || p.PeriodSeconds < grace {
			return fmt.Errorf("scale-down policy %s %d per %d s: want at most 1 pod per %d s (the grace period)", p.Type, p.Value, p.PeriodSeconds, grace)
		}
	}
	return nil
}

// scaler is what sets a Deployment's replica count.
type scaler struct {
	Name     string
	Min, Max int32
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
	HPA      *autoscalingv2.HorizontalPodAutoscaler
	Scaled   *ScaledObject
}

// scaler finds the one autoscaler of d: an HPA or a KEDA ScaledObject
// (which makes its own HPA); two would fight over the replica count.
func (o *Objects) scaler(d *appsv1.Deployment) (scaler, error) {
	var found []scaler
	for _, h := range o.HPAs {
		ref := h.Spec.ScaleTargetRef
		if h.Namespace == d.Namespace && ref.Kind == "Deployment" && ref.Name == d.Name {
			found = append(found, scaler{"HorizontalPodAutoscaler/" + h.Name, deref32(h.Spec.MinReplicas, 1), h.Spec.MaxReplicas, h.Spec.Behavior, h, nil})
		}
	}
	for _, so := range o.ScaledObjects {
		ref := so.Spec.ScaleTargetRef
		if so.Metadata.Namespace == d.Namespace && (ref.Kind == "" || ref.Kind == "Deployment") && ref.Name == d.Name {
			s := scaler{Name: "ScaledObject/" + so.Metadata.Name, Min: deref32(so.Spec.MinReplicaCount, 0), Scaled: so}
			if so.Spec.MaxReplicaCount == nil {
				return scaler{}, fmt.Errorf("%s: no maxReplicaCount (KEDA's default is 100)", s.Name)
			}
			s.Max = *so.Spec.MaxReplicaCount
			if a := so.Spec.Advanced; a != nil && a.HorizontalPodAutoscalerConfig != nil {
				s.Behavior = a.HorizontalPodAutoscalerConfig.Behavior
			}
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		names := make([]string, len(found))
		for i, s := range found {
			names[i] = s.Name
		}
		return scaler{}, fmt.Errorf("Deployment/%s: %d autoscalers %v, want exactly one", d.Name, len(found), names)
	}
	return found[0], nil
}

func deref32(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// checkScalers: the API scales on CPU; the workers on the queue, never
// below one (a worker runs the reconciler); a ScaledObject's triggers are
// Prometheus queries of this namespace's holdfast-api job and holdfast's
// write queues (alerts.yml's queues but maintenance).
func checkScalers(o *Objects) error {
	queues, err := writeQueues()
	if err != nil {
		return err
	}
	var errs []error
	for _, w := range o.workloads() {
		if w.Deployment == nil {
			continue
		}
		s, err := o.scaler(w.Deployment)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if s.Min < 1 || s.Min > s.Max {
			errs = append(errs, fmt.Errorf("%s: replicas %d to %d: want 1 ≤ min ≤ max", s.Name, s.Min, s.Max))
		}
		switch {
		case w.Component == api && (s.HPA == nil || !scalesOnCPU(s.HPA)):
			errs = append(errs, fmt.Errorf("%s: the API scales on CPU, by a HorizontalPodAutoscaler", s.Name))
		case w.Component == worker && s.HPA != nil && !scalesOnExternal(s.HPA):
			errs = append(errs, fmt.Errorf("%s: the workers scale on the queue (External metrics)", s.Name))
		case w.Component == worker && s.Scaled != nil:
			errs = append(errs, checkTriggers(s.Scaled, queues))
		}
	}
	return errors.Join(errs...)
}

func scalesOnCPU(h *autoscalingv2.HorizontalPodAutoscaler) bool {
	return slices.ContainsFunc(h.Spec.Metrics, func(m autoscalingv2.MetricSpec) bool {
		return m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU
	})
}

func scalesOnExternal(h *autoscalingv2.HorizontalPodAutoscaler) bool {
	return len(h.Spec.Metrics) > 0 && !slices.ContainsFunc(h.Spec.Metrics, func(m autoscalingv2.MetricSpec) bool {
		return m.Type != autoscalingv2.ExternalMetricSourceType
	})
}

var (
	namespaceMatcher = regexp.MustCompile(`namespace="([^"]*)"`)
	queueMatcher     = regexp.MustCompile(`queue=~"([^"]*)"`)
)

func checkTriggers(so *ScaledObject, queues string) error {
	var errs []error
	if len(so.Spec.Triggers) == 0 {
		errs = append(errs, fmt.Errorf("ScaledObject/%s: no trigger", so.Metadata.Name))
	}
	for _, t := range so.Spec.Triggers {
		where := fmt.Sprintf("ScaledObject/%s trigger %s", so.Metadata.Name, t.Name)
		if t.Type != "prometheus" {
			errs = append(errs, fmt.Errorf("%s: type %q, want prometheus", where, t.Type))
			continue
		}
		for k := range t.Metadata {
			if !prometheusTriggerKeys[k] {
				errs = append(errs, fmt.Errorf("%s: unknown metadata %q", where, k))
			}
		}
		q := t.Metadata["query"]
		if q == "" || t.Metadata["serverAddress"] == "" || t.Metadata["threshold"] == "" {
			errs = append(errs, fmt.Errorf("%s: serverAddress, query and threshold are required", where))
		}
		if m := namespaceMatcher.FindStringSubmatch(q); m == nil || m[1] != so.Metadata.Namespace {
			errs = append(errs, fmt.Errorf("%s: the query must select namespace=%q, the ScaledObject's", where, so.Metadata.Namespace))
		}
		if !strings.Contains(q, `job="holdfast-api"`) {
			errs = append(errs, fmt.Errorf("%s: the query must select job=\"holdfast-api\" (the API exports the queue metrics)", where))
		}
		if m := queueMatcher.FindStringSubmatch(q); m == nil || m[1] != queues {
			errs = append(errs, fmt.Errorf("%s: the query must select queue=~%q", where, queues))
		}
	}
	return errors.Join(errs...)
}

// writeQueues are the queues of alerts.yml's first rule without
// maintenance, as a regular expression.
func writeQueues() (string, error) {
	spec, err := AlertRules(root)
	if err != nil {
		return "", err
	}
	m := queueMatcher.FindStringSubmatch(spec.Groups[0].Rules[0].Expr.String())
	if m == nil {
		return "", fmt.Errorf("%s: no queue selector in its first rule", AlertsFile)
	}
	qs := slices.DeleteFunc(strings.Split(m[1], "|"), func(q string) bool { return q == "maintenance" })
	return strings.Join(qs, "|"), nil
}

// checkMonitoring: the PrometheusRule's rules are dashboards/alerts.yml's,
// the dashboard ConfigMap holds dashboards/holdfast.json, and the
// ServiceMonitors scrape Services named after the jobs of
// dashboards/prometheus.yml on a port they declare.
func checkMonitoring(o *Objects) error {
	var errs []error
	want, err := AlertRules(root)
	if err != nil {
		return err
	}
	if len(o.PrometheusRules) != 1 {
		errs = append(errs, fmt.Errorf("%d PrometheusRules, want 1", len(o.PrometheusRules)))
	} else if got := o.PrometheusRules[0].Spec; !reflect.DeepEqual(got, want) {
		errs = append(errs, fmt.Errorf("PrometheusRule %s: its rules are not %s's: run make manifests", o.PrometheusRules[0].Name, AlertsFile))
	}
	dashboard, err := os.ReadFile(filepath.Join(root, DashboardFile))
	if err != nil {
		return err
	}
	found := 0
	for _, cm := range o.ConfigMaps {
		if cm.Labels["grafana_dashboard"] != "1" {
			continue
		}
		found++
		if cm.Data[filepath.Base(DashboardFile)] != string(dashboard) {
			errs = append(errs, fmt.Errorf("ConfigMap %s: not %s: run make manifests", cm.Name, DashboardFile))
		}
	}
	if found != 1 {
		errs = append(errs, fmt.Errorf("%d ConfigMaps labelled grafana_dashboard=1, want 1", found))
	}
	jobs, err := prometheusJobs()
	if err != nil {
		return err
	}
	var scraped []string
	for _, sm := range o.ServiceMonitors {
		n := 0
		for _, svc := range o.Services {
			if svc.Namespace != sm.Namespace || !matches(sm.Spec.Selector.MatchLabels, svc.Labels) {
				continue
			}
			n++
			scraped = append(scraped, svc.Name)
			for _, ep := range sm.Spec.Endpoints {
				if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
					errs = append(errs, fmt.Errorf("ServiceMonitor %s: Service %s has no port %q", sm.Name, svc.Name, ep.Port))
				}
			}
		}
		if n != 1 {
			errs = append(errs, fmt.Errorf("ServiceMonitor %s selects %d Services, want 1", sm.Name, n))
		}
	}
	sort.Strings(scraped)
	if !slices.Equal(scraped, jobs) {
		errs = append(errs, fmt.Errorf("scraped Services %v, want the jobs of dashboards/prometheus.yml %v", scraped, jobs))
	}
	return errors.Join(errs...)
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func prometheusJobs() ([]string, error) {
	src, err := os.ReadFile(filepath.Join(root, "dashboards/prometheus.yml"))
	if err != nil {
		return nil, err
	}
	var c struct {
		ScrapeConfigs []struct {
			JobName string `json:"job_name"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(src, &c); err != nil {
		return nil, err
	}
	var jobs []string
	for _, s := range c.ScrapeConfigs {
		jobs = append(jobs, s.JobName)
	}
	sort.Strings(jobs)
	return jobs, nil
}

// allowedEgress are the ports holdfast's pods may reach: DNS, Postgres,
// Redis and Sentinel.
var allowedEgress = map[int32]bool{53: true, 5432: true, 6379: true, 26379: true}

// checkNetwork: every workload's pods are under a NetworkPolicy for both
// directions; they may reach only allowedEgress's ports, and be reached
// only on ports their container declares (the migration Job on none).
func checkNetwork(o *Objects) error {
	var errs []error
	for _, w := range o.workloads() {
		labels := podLabels(w, o)
		ingress, egress := false, false
		for _, np := range o.NetworkPolicies {
			if np.Namespace != w.Namespace || !matches(np.Spec.PodSelector.MatchLabels, labels) {
				continue
			}
			for _, t := range np.Spec.PolicyTypes {
				ingress = ingress || t == "Ingress"
				egress = egress || t == "Egress"
			}
			for _, rule := range np.Spec.Egress {
				if len(rule.Ports) == 0 {
					errs = append(errs, fmt.Errorf("NetworkPolicy %s: an egress rule without ports", np.Name))
				}
				for _, p := range rule.Ports {
					if p.Port == nil || p.Port.Type != intstr.Int || !allowedEgress[p.Port.IntVal] || p.EndPort != nil {
						errs = append(errs, fmt.Errorf("NetworkPolicy %s: egress to port %v: only DNS, Postgres and Redis", np.Name, portString(p.Port)))
					}
				}
			}
			for _, rule := range np.Spec.Ingress {
				if len(rule.Ports) == 0 {
					errs = append(errs, fmt.Errorf("NetworkPolicy %s: an ingress rule without ports", np.Name))
				}
				for _, p := range rule.Ports {
					if p.Port == nil || !declaresPort(w.Spec.Containers[0], *p.Port) {
						errs = append(errs, fmt.Errorf("NetworkPolicy %s: ingress to port %v, which %s does not declare", np.Name, portString(p.Port), w))
					}
				}
			}
		}
		if !ingress || !egress {
			errs = append(errs, fmt.Errorf("%s: its pods need a NetworkPolicy for Ingress and for Egress", w))
		}
	}
	return errors.Join(errs...)
}

func podLabels(w workload, o *Objects) map[string]string {
	if w.Deployment != nil {
		return w.Deployment.Spec.Template.Labels
	}
	if j := o.job(w.Name); j != nil {
		return j.Spec.Template.Labels
	}
	return nil
}

func portString(p *intstr.IntOrString) string {
	if p == nil {
		return "any"
	}
	return p.String()
}

// migrateLabel marks what `kubectl apply -l holdfast/migrate=true` applies
// before a rollout: the migration Job and what it needs.
const migrateLabel = "holdfast/migrate"

// checkMigrateStep: the objects labelled migrateLabel are the Job, the
// ConfigMaps and ServiceAccount it uses and the NetworkPolicies of its
// pods, and no Deployment.
func checkMigrateStep(o *Objects) error {
	var errs []error
	labelled := func(kind, name string, labels map[string]string, want bool) {
		if (labels[migrateLabel] == "true") != want {
			errs = append(errs, fmt.Errorf("%s/%s: label %s=true %s", kind, name, migrateLabel, map[bool]string{true: "missing", false: "on what the migration does not need"}[want]))
		}
	}
	if len(o.Jobs) != 1 {
		return fmt.Errorf("%d Jobs, want the migration Job", len(o.Jobs))
	}
	job := o.Jobs[0]
	labelled("Job", job.Name, job.Labels, true)
	used := map[string]bool{}
	for _, c := range job.Spec.Template.Spec.Containers {
		for _, from := range c.EnvFrom {
			if from.ConfigMapRef != nil {
				used[from.ConfigMapRef.Name] = true
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				used[e.ValueFrom.ConfigMapKeyRef.Name] = true
			}
		}
	}
	for _, cm := range o.ConfigMaps {
		if used[cm.Name] {
			labelled("ConfigMap", cm.Name, cm.Labels, true)
		}
	}
	for _, sa := range o.ServiceAccounts {
		if sa.Name == job.Spec.Template.Spec.ServiceAccountName {
			labelled("ServiceAccount", sa.Name, sa.Labels, true)
		}
	}
	for _, np := range o.NetworkPolicies {
		if matches(np.Spec.PodSelector.MatchLabels, job.Spec.Template.Labels) {
			labelled("NetworkPolicy", np.Name, np.Labels, true)
		}
	}
	for _, d := range o.Deployments {
		labelled("Deployment", d.Name, d.Labels, false)
	}
	return errors.Join(errs...)
}
