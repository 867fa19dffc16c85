// Package deploy is temporary: it names the modules the image builder and the
// manifest checks use until their code lands.
package deploy

import (
	_ "github.com/google/go-containerregistry/pkg/v1/tarball"
	_ "github.com/holdfast/holdfast/config"
	_ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	_ "k8s.io/api/apps/v1"
	_ "k8s.io/api/autoscaling/v2"
	_ "k8s.io/api/batch/v1"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/api/networking/v1"
	_ "k8s.io/api/policy/v1"
	_ "k8s.io/apimachinery/pkg/util/yaml"
	_ "sigs.k8s.io/kustomize/api/krusty"
	_ "sigs.k8s.io/kustomize/kyaml/filesys"
	_ "sigs.k8s.io/yaml"
)
