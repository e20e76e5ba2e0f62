package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseDefaults(t *testing.T) {
	cfg, err := Parse([]byte(`
apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: /etc/baremetal-ccm/inventory.yaml}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Inventory.File.PollInterval.Duration; got != DefaultFilePollInterval {
		t.Errorf("file.pollInterval = %v, want %v", got, DefaultFilePollInterval)
	}
	g := cfg.Inventory.DeletionGuard
	if *g.MaxRemovedHosts != DefaultMaxRemovedHosts || *g.MaxRemovedPercent != DefaultMaxRemovedPercent || g.AcknowledgeFile != DefaultAcknowledgeFile {
		t.Errorf("deletionGuard defaults = %d/%d/%q", *g.MaxRemovedHosts, *g.MaxRemovedPercent, g.AcknowledgeFile)
	}
	if cfg.EventsNamespace != "kube-system" {
		t.Errorf("eventsNamespace = %q", cfg.EventsNamespace)
	}
}

func TestParseHTTPDefaultsAndExplicitValues(t *testing.T) {
	cfg, err := Parse([]byte(`
apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  http:
    url: https://inventory.example/hosts
    caFile: /etc/ca.pem
    timeout: 3s
  deletionGuard:
    maxRemovedHosts: 0
    maxRemovedPercent: 100
`))
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Inventory.HTTP
	if h.Timeout.Duration != 3*time.Second || h.PollInterval.Duration != DefaultHTTPPollInterval || h.MaxBodyBytes != DefaultHTTPMaxBodyBytes {
		t.Errorf("http = %+v", h)
	}
	if *cfg.Inventory.DeletionGuard.MaxRemovedHosts != 0 || *cfg.Inventory.DeletionGuard.MaxRemovedPercent != 100 {
		t.Error("explicit zero/100 guard values must survive defaulting")
	}
}

// TestParseErrors checks that every problem is reported at once, each with its path.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{
			name: "unknown field names its path",
			doc: `apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory:
  file: {path: /x, pollIntervall: 5s}`,
			want: []string{`unknown field "inventory.file.pollIntervall"`},
		},
		{
			name: "duplicate key",
			doc: `apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
kind: CloudConfig
inventory: {file: {path: /x}}`,
			want: []string{`"kind"`, "already set"},
		},
		{
			name: "all validation errors at once",
			doc: `apiVersion: v1
kind: Config
eventsNamespace: Bad_NS
inventory:
  file: {path: relative.yaml, pollInterval: 0s}
  http: {url: "ftp://x/y", timeout: -1s, clientCertFile: /c}
  deletionGuard: {maxRemovedHosts: -1, maxRemovedPercent: 101, acknowledgeFile: ack}`,
			want: []string{
				"apiVersion: Unsupported value",
				"kind: Unsupported value",
				"eventsNamespace: Invalid value",
				"inventory.http: Forbidden",
				"inventory.file.path: Invalid value",
				"inventory.file.pollInterval: Invalid value",
				"inventory.http.url: Invalid value",
				"inventory.http.timeout",
				"inventory.http.clientKeyFile: Required",
				"inventory.deletionGuard.maxRemovedHosts",
				"inventory.deletionGuard.maxRemovedPercent",
				"inventory.deletionGuard.acknowledgeFile",
			},
		},
		{
			name: "no source",
			doc:  "apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\n",
			want: []string{"inventory: Required value", "inventory.file.path or inventory.http.url"},
		},
		{
			name: "credentials in URL are refused and not echoed",
			doc: `apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory: {http: {url: "https://user:hunter2@inv.example/x"}}`,
			want: []string{"inventory.http.url", "must not carry credentials"},
		},
		{
			name: "TLS options need https",
			doc: `apiVersion: baremetal-ccm.io/v1alpha1
kind: CloudConfig
inventory: {http: {url: "http://inv.example/x", insecureSkipVerify: true}}`,
			want: []string{"need an https:// URL"},
		},
		{
			name: "empty document",
			doc:  "",
			want: []string{"document is empty"},
		},
		{
			name: "not YAML",
			doc:  "inventory: [",
			want: []string{"not valid YAML"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error leaks a password: %v", err)
			}
		})
	}
}

func TestValidationErrorIsErrInvalid(t *testing.T) {
	_, err := Parse([]byte("apiVersion: x\nkind: CloudConfig\ninventory: {file: {path: /x}}"))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v does not wrap ErrInvalid", err)
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory: {file: {path: /x}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatal(err)
	}
	_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load(missing) = %v, want ErrNotExist", err)
	}
}

// TestExampleConfigs keeps the shipped examples valid.
func TestExampleConfigs(t *testing.T) {
	matches, _ := filepath.Glob("../../packaging/examples/cloud-config*.yaml")
	if len(matches) < 2 {
		t.Fatalf("examples not found: %v", matches)
	}
	for _, m := range matches {
		if _, err := Load(m); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
}

// TestUnknownFieldsAndValidationTogether: an unknown field does not hide the
// validation errors of the rest of the document.
func TestUnknownFieldsAndValidationTogether(t *testing.T) {
	_, err := Parse([]byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory:\n  file: {path: /x, pollIntervall: 5s}\n  deletionGuard: {maxRemovedPercent: 200}\n"))
	for _, want := range []string{`unknown field "inventory.file.pollIntervall"`, "inventory.deletionGuard.maxRemovedPercent"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

func TestBMCDefaultsAndValidation(t *testing.T) {
	cfg, err := Parse([]byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory: {file: {path: /x}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.BMC
	if b.CallTimeout.Duration != DefaultBMCCallTimeout || b.CacheTTL.Duration != DefaultBMCCacheTTL || b.MaxConcurrent != DefaultBMCMaxConcurrent ||
		b.FailureThreshold != DefaultBMCFailures || b.BackoffInitial.Duration != DefaultBMCBackoffInitial || b.BackoffMax.Duration != DefaultBMCBackoffMax {
		t.Errorf("bmc defaults = %+v", b)
	}
	_, err = Parse([]byte("apiVersion: baremetal-ccm.io/v1alpha1\nkind: CloudConfig\ninventory: {file: {path: /x}}\nbmc: {callTimeout: 0s, cacheTTL: -1s, maxConcurrent: -2, failureThreshold: -1, backoffInitial: 1m, backoffMax: 10s}\n"))
	for _, want := range []string{"bmc.callTimeout", "bmc.cacheTTL", "bmc.maxConcurrent", "bmc.failureThreshold", "bmc.backoffMax"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %s", err, want)
		}
	}
}
