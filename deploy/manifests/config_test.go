package manifests

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/holdfast/holdfast/config"
)

// setting is one of config.Config's environment variables.
type setting struct {
	Name    string
	Default string // envDefault; empty when it has none
}

// configSettings walks config.Config's `env` tags, nested structs included,
// as the env package reads them.
func configSettings() map[string]setting {
	out := map[string]setting{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
			if name == "" {
				if ft.Kind() == reflect.Struct && f.IsExported() {
					walk(ft, prefix+f.Tag.Get("envPrefix"))
				}
				continue
			}
			out[prefix+name] = setting{Name: prefix + name, Default: f.Tag.Get("envDefault")}
		}
	}
	walk(reflect.TypeFor[config.Config](), "")
	return out
}

// secretSettings are the settings whose values are secrets: they come from
// the Secret "holdfast" (key = setting name), never from a ConfigMap.
var secretSettings = map[string]bool{
	"DATABASE_URL": true, "REDIS_URL": true, "REDIS_USERNAME": true, "REDIS_PASSWORD": true,
	"REDIS_SENTINEL_PASSWORD": true, "JWT_SECRET": true, "JWT_SECRET_PREVIOUS": true,
}

// clusterValues are the settings whose ConfigMap value may differ from the
// config default, each with why; every other ConfigMap value is the default.
var clusterValues = map[string]string{
	"HTTP_ADDR":        "listen on the pod's address, not loopback",
	"WORKER_ADDR":      "listen on the pod's address, not loopback",
	"METRICS_ADDR":     "the API's /metrics off its public port",
	"MONITORING_ADDR":  "Asynqmon off the public port",
	"PG_MAX_CONNS":     "sized by the connection budget",
	"MIGRATE_ON_START": "the migration Job migrates",
}

// secretPlaceholders stand in for the values of required secrets when a
// container's environment is loaded as the binary would.
var secretPlaceholders = map[string]string{
	"DATABASE_URL": "postgres://holdfast@postgres:5432/holdfast",
	"JWT_SECRET":   strings.Repeat("s", 32),
}

// loadConfig loads env as the binary would (config.FromMap), with
// placeholders for required secrets and optional ones left unset.
func loadConfig(env map[string]envVar) (config.Config, error) {
	vars := map[string]string{}
	for name, v := range env {
		switch {
		case v.Secret == nil:
			vars[name] = v.Value
		case v.Secret.Optional != nil && *v.Secret.Optional:
		default:
			p, ok := secretPlaceholders[name]
			if !ok {
				return config.Config{}, fmt.Errorf("required secret %s has no placeholder in secretPlaceholders", name)
			}
			vars[name] = p
		}
	}
	return config.FromMap(vars)
}
