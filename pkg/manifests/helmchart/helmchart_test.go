package helmchart

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated files of charts/baremetal-ccm")

const chartDir = "../../../charts/baremetal-ccm"

// TestChartUpToDate: the checked-in values.yaml and templates are what Files generates
// from pkg/manifests now, and the templates directory holds nothing else.
func TestChartUpToDate(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		p := filepath.Join(chartDir, name)
		if *update {
			if err := os.WriteFile(p, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("%v (run go test ./pkg/manifests/helmchart -update)", err)
			continue
		}
		if string(got) != string(want) {
			t.Errorf("charts/baremetal-ccm/%s is not what pkg/manifests generates: run go test ./pkg/manifests/helmchart -update and review the diff", name)
		}
	}
	entries, err := os.ReadDir(filepath.Join(chartDir, "templates"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := files["templates/"+e.Name()]; !ok {
			t.Errorf("charts/baremetal-ccm/templates/%s is not generated: every template must come from pkg/manifests", e.Name())
		}
	}
}

func TestInsertions(t *testing.T) {
	base := []string{"a\n", "b\n", "c\n"}
	ins, err := insertions(base, []string{"x\n", "a\n", "b\n", "y\n", "z\n", "c\n", "w\n"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ins[0], []string{"x\n"}) || !slices.Equal(ins[2], []string{"y\n", "z\n"}) || !slices.Equal(ins[3], []string{"w\n"}) || len(ins) != 3 {
		t.Errorf("insertions = %v", ins)
	}
	if _, err := insertions(base, []string{"a\n", "c\n"}); err == nil {
		t.Error("a removed line was taken for an insertion")
	}
	out, err := conditional(func() ([]string, error) { return base, nil }, []feature{{name: "f", variants: []variant{
		{cond: "$p", render: func() ([]string, error) { return []string{"a\n", "p\n", "b\n", "c\n"}, nil }},
		{cond: "$q", render: func() ([]string, error) { return []string{"a\n", "q\n", "b\n", "c\n"}, nil }},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "a\n{{- if $p }}\np\n{{- else if $q }}\nq\n{{- end }}\nb\nc\n"
	if string(out) != want {
		t.Errorf("conditional = %q, want %q", out, want)
	}
	_, err = conditional(func() ([]string, error) { return base, nil }, []feature{
		{name: "f", variants: []variant{{cond: "$p", render: func() ([]string, error) { return []string{"a\n", "p\n", "b\n", "c\n"}, nil }}}},
		{name: "g", variants: []variant{{cond: "$q", render: func() ([]string, error) { return []string{"a\n", "q\n", "b\n", "c\n"}, nil }}}},
	})
	if err == nil || !strings.Contains(err.Error(), "same place") {
		t.Errorf("two features at one place: %v", err)
	}
}
