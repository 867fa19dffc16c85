package testenv

import (
	"reflect"
	"testing"

	"github.com/holdfast/holdfast/config"
)

// Every setting the speed-ups-off run turns off is a switch of
// config.Config that is on by default: a misspelt name would be ignored by
// the configuration and leave its speed-up on while the run claims it off.
func TestSpeedupsOffNamesSwitchesThatDefaultOn(t *testing.T) {
	defaults := map[string]string{}
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		f := ct.Field(i)
		if name := f.Tag.Get("env"); name != "" && f.Type.Kind() == reflect.Bool {
			defaults[name] = f.Tag.Get("envDefault")
		}
	}
	for name, off := range speedupsOff {
		def, ok := defaults[name]
		if !ok {
			t.Errorf("%s is not a boolean setting of config.Config", name)
			continue
		}
		if def != "true" || off != "false" {
			t.Errorf("%s: default %q, off %q; want a switch on by default that the run sets false", name, def, off)
		}
	}
}
