// Package manifests writes the Kubernetes objects that deploy/kubernetes
// derives from dashboards/ (the alert rules as a PrometheusRule, the Grafana
// dashboard as a ConfigMap), so that dashboards/ stays their one source:
// kustomize reads nothing outside its root. Its tests build and check every
// kustomization under deploy/kubernetes.
package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// GeneratedDir is where the generated files live, relative to the
// repository's root.
const GeneratedDir = "deploy/kubernetes/base/generated"

// The sources, relative to the repository's root.
const (
	AlertsFile    = "dashboards/alerts.yml"
	DashboardFile = "dashboards/holdfast.json"
)

// File is one generated file: its name in GeneratedDir and its content.
type File struct {
	Name string
	Data []byte
}

// Generate returns the files GeneratedDir holds, built from the sources
// under root (the repository's root).
func Generate(root string) ([]File, error) {
	rule, err := prometheusRule(root)
	if err != nil {
		return nil, err
	}
	dashboard, err := dashboardConfigMap(root)
	if err != nil {
		return nil, err
	}
	return []File{{"prometheusrule.yaml", rule}, {"grafana-dashboard.yaml", dashboard}}, nil
}

// Write replaces GeneratedDir's files with what Generate returns.
func Write(root string) error {
	files, err := Generate(root)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, GeneratedDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func header(source string) string {
	return fmt.Sprintf("# Generated from %s by `make manifests` (deploy/cmd/manifests): do not edit.\n", source)
}

// AlertRules reads dashboards/alerts.yml as the spec of a PrometheusRule,
// strictly: a field the Prometheus Operator does not know is an error.
func AlertRules(root string) (monitoringv1.PrometheusRuleSpec, error) {
	var spec monitoringv1.PrometheusRuleSpec
	src, err := os.ReadFile(filepath.Join(root, AlertsFile))
	if err != nil {
		return spec, err
	}
	j, err := yaml.YAMLToJSON(src)
	if err != nil {
		return spec, fmt.Errorf("%s: %w", AlertsFile, err)
	}
	if err := strictJSON(j, &spec); err != nil {
		return spec, fmt.Errorf("%s: %w", AlertsFile, err)
	}
	return spec, nil
}

// strictJSON decodes j into v, case-sensitively, failing on an unknown or
// repeated field.
func strictJSON(j []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(j, v, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return nil
}

func prometheusRule(root string) ([]byte, error) {
	spec, err := AlertRules(root)
	if err != nil {
		return nil, err
	}
	rule := struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metadata                        `json:"metadata"`
		Spec            monitoringv1.PrometheusRuleSpec `json:"spec"`
	}{
		TypeMeta: metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.PrometheusRuleKind},
		Metadata: metadata{Name: "holdfast"},
		Spec:     spec,
	}
	out, err := yaml.Marshal(rule)
	if err != nil {
		return nil, err
	}
	return append([]byte(header(AlertsFile)), out...), nil
}

// metadata is the little of ObjectMeta the generated objects set, so that
// their YAML carries no empty fields.
type metadata struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
}

// dashboardConfigMap is the dashboard as a ConfigMap that Grafana's
// dashboard sidecar loads (label grafana_dashboard: "1"), its JSON kept
// verbatim.
func dashboardConfigMap(root string) ([]byte, error) {
	src, err := os.ReadFile(filepath.Join(root, DashboardFile))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(header(DashboardFile))
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: holdfast-dashboard\n  labels:\n    grafana_dashboard: \"1\"\ndata:\n")
	b.WriteString("  " + filepath.Base(DashboardFile) + ": ")
	b.WriteString(blockScalar(string(src), "    "))
	return b.Bytes(), nil
}

// blockScalar writes s as a YAML literal block, line for line, when YAML
// reads it back unchanged that way (one final newline, no blank or
// tab-indented line); else as a double-quoted scalar.
func blockScalar(s, indent string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	literal := strings.HasSuffix(s, "\n") && !strings.HasSuffix(s, "\n\n")
	for _, l := range lines {
		literal = literal && strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "\t") && !strings.HasSuffix(l, " ")
	}
	if !literal {
		q, _ := json.Marshal(s) // JSON's string escapes are YAML's too
		return string(q) + "\n"
	}
	var b strings.Builder
	b.WriteString("|\n")
	for _, l := range lines {
		b.WriteString(indent + l + "\n")
	}
	return b.String()
}
