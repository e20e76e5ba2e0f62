package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const routesDocHead = `apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory: {file: {path: /etc/baremetal-ccm/inventory.yaml}}
`

func TestRoutesDefaults(t *testing.T) {
	cfg, err := Parse([]byte(routesDocHead + "routes: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Routes
	if r.Table != 254 || r.Protocol != 196 || r.Mirror == nil || !*r.Mirror || r.ResyncInterval.Duration != time.Minute {
		t.Errorf("defaults = table %d protocol %d mirror %v resync %v", r.Table, r.Protocol, r.Mirror, r.ResyncInterval)
	}
}

func TestRoutesAbsentStaysNil(t *testing.T) {
	cfg, err := Parse([]byte(routesDocHead))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Routes != nil {
		t.Errorf("routes = %+v, want nil when the section is absent", cfg.Routes)
	}
}

func TestRoutesExplicitValuesSurvive(t *testing.T) {
	cfg, err := Parse([]byte(routesDocHead + "routes: {table: 100, protocol: 250, mirror: false, resyncInterval: 30s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Routes
	if r.Table != 100 || r.Protocol != 250 || *r.Mirror || r.ResyncInterval.Duration != 30*time.Second {
		t.Errorf("routes = table %d protocol %d mirror %v resync %v", r.Table, r.Protocol, *r.Mirror, r.ResyncInterval)
	}
}

func TestRoutesDefaultProtocolIsNotReserved(t *testing.T) {
	if _, ok := reservedRouteProtocols[DefaultRoutesProtocol]; ok {
		t.Fatal("the default protocol is in the reserved list")
	}
	if _, ok := reservedRouteTables[DefaultRoutesTable]; ok {
		t.Fatal("the default table is in the reserved list")
	}
}

func TestValidateRoutesFields(t *testing.T) {
	valid := func() *RoutesConfig {
		r := &RoutesConfig{}
		setRoutesDefaults(r)
		return r
	}
	tests := []struct {
		name   string
		mutate func(*RoutesConfig)
		want   []string // substrings; empty: valid
	}{
		{name: "defaults", mutate: func(*RoutesConfig) {}},
		{name: "own table", mutate: func(r *RoutesConfig) { r.Table = 100 }},
		{name: "large table", mutate: func(r *RoutesConfig) { r.Table = 1<<31 - 1 }},
		{name: "protocol 5", mutate: func(r *RoutesConfig) { r.Protocol = 5 }},
		{name: "protocol 255", mutate: func(r *RoutesConfig) { r.Protocol = 255 }},
		{name: "table local", mutate: func(r *RoutesConfig) { r.Table = 255 },
			want: []string{"routes.table: Invalid value: 255", "local", "use 254"}},
		{name: "table default", mutate: func(r *RoutesConfig) { r.Table = 253 },
			want: []string{"routes.table", "reserved"}},
		{name: "table compat", mutate: func(r *RoutesConfig) { r.Table = 252 },
			want: []string{"routes.table", "compat"}},
		{name: "negative table", mutate: func(r *RoutesConfig) { r.Table = -1 },
			want: []string{"routes.table", "1-4294967295"}},
		{name: "protocol kernel", mutate: func(r *RoutesConfig) { r.Protocol = 2 },
			want: []string{"routes.protocol", `"kernel"`, "5-255"}},
		{name: "protocol static", mutate: func(r *RoutesConfig) { r.Protocol = 4 },
			want: []string{"routes.protocol", `"static"`}},
		{name: "protocol bird", mutate: func(r *RoutesConfig) { r.Protocol = 12 },
			want: []string{"routes.protocol", `"bird"`, "default 196"}},
		{name: "protocol bgp", mutate: func(r *RoutesConfig) { r.Protocol = 186 },
			want: []string{"routes.protocol", `"bgp"`}},
		{name: "protocol too big", mutate: func(r *RoutesConfig) { r.Protocol = 256 },
			want: []string{"routes.protocol", "8-bit", "5-255"}},
		{name: "zero resync", mutate: func(r *RoutesConfig) { r.ResyncInterval = &metav1.Duration{} },
			want: []string{"routes.resyncInterval", "positive"}},
		{name: "all at once", mutate: func(r *RoutesConfig) {
			r.Table, r.Protocol, r.ResyncInterval = 255, 3, &metav1.Duration{Duration: -time.Second}
		}, want: []string{"routes.table", "routes.protocol", "routes.resyncInterval"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := valid()
			tt.mutate(r)
			errs := validateRoutes(r, field.NewPath("routes"))
			if len(tt.want) == 0 {
				if len(errs) != 0 {
					t.Fatalf("unexpected errors: %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatal("no error")
			}
			msg := errs.ToAggregate().Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not mention %q:\n%s", w, msg)
				}
			}
		})
	}
}

func TestRoutesErrorsThroughParse(t *testing.T) {
	_, err := Parse([]byte(routesDocHead + "routes: {table: 255, protocol: 186, resyncInterval: 0s}\n"))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v does not wrap ErrInvalid", err)
	}
	for _, w := range []string{"routes.table", "routes.protocol", "routes.resyncInterval"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not mention %q: %v", w, err)
		}
	}
}
