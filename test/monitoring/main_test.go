package monitoring

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated files (prometheus-rules.yaml, grafana-dashboard.json)")

// root returns the module root or fails the test.
func root(t *testing.T) string {
	t.Helper()
	r, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// read returns the content of a file under the module root or fails the test.
func read(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// checkGenerated compares a generated file with the one checked in, or rewrites it
// with -update.
func checkGenerated(t *testing.T, rel string, want []byte) {
	t.Helper()
	path := filepath.Join(root(t), rel)
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s is not what its generator makes: run go test ./test/monitoring -update", rel)
	}
}
