package monitoring

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// leaderElectionMetrics is the package that defines leader_election_master_status
// (client-go's leader election metrics, registered by k8s.io/component-base); the
// CCM's main imports it through k8s.io/component-base/metrics/prometheus/clientgo.
const leaderElectionMetrics = "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection"

// TestReferencedMetricsDefined: every metric the rules and the dashboard read is
// defined by the CCM's source (or by the leader-election package its main links),
// with every label they match or group by. The e2e test TestMonitoringMetricsExist
// checks the same against a running CCM's /metrics.
func TestReferencedMetricsDefined(t *testing.T) {
	r := root(t)
	refs, err := Shipped(r)
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{filepath.Join(r, "pkg"), filepath.Join(r, "cmd"), filepath.Join(r, "internal")}
	dirs = append(dirs, linkedPackageDir(t, r, "./cmd/baremetal-cloud-controller-manager", leaderElectionMetrics))
	defined, err := definedMetrics(dirs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range defined.Check(refs, nil) {
		t.Error(p)
	}
	var names []string
	for _, n := range refs.Names() {
		names = append(names, fmt.Sprintf("%s %v", n, refs.Uses[n].Labels))
	}
	t.Logf("%d metrics read by %s and %s:\n%s", len(names), RulesFile, DashboardFile, strings.Join(names, "\n"))
}

// TestDashboardCoversEveryMetric: every baremetal_ccm_ metric the source defines is
// on the dashboard.
func TestDashboardCoversEveryMetric(t *testing.T) {
	r := root(t)
	d, err := ParseDashboard(read(t, DashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	qs, err := d.Queries(DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := Collect(qs)
	if err != nil {
		t.Fatal(err)
	}
	defined, err := definedMetricFamilies(filepath.Join(r, "pkg"), filepath.Join(r, "cmd"), filepath.Join(r, "internal"))
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 30 {
		t.Fatalf("found only %d metric definitions in the source: %v", len(defined), defined)
	}
	for _, f := range defined {
		if !strings.HasPrefix(f.name, "baremetal_ccm_") {
			continue
		}
		if !slices.ContainsFunc(f.series(), func(s string) bool { return refs.Uses[s] != nil }) {
			t.Errorf("%s (%s) is on no panel of %s", f.name, f.pos, DashboardFile)
		}
	}
}

// linkedPackageDir returns the directory of pkg after checking that main links it.
func linkedPackageDir(t *testing.T, root, main, pkg string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", main)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", main, err)
	}
	if !slices.Contains(strings.Fields(string(out)), pkg) {
		t.Fatalf("%s does not link %s any more: its metrics are not served", main, pkg)
	}
	cmd = exec.CommandContext(ctx, "go", "list", "-f", "{{.Dir}}", pkg)
	cmd.Dir = root
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.TrimSpace(string(out))
}

// metricFamily is a metric defined in the source.
type metricFamily struct {
	name   string
	kind   string // Counter, Gauge, Histogram, Summary
	labels []string
	pos    string
}

// series returns the names of the family's series with their label names.
func (f metricFamily) series() []string {
	switch f.kind {
	case "Histogram":
		return []string{f.name + "_bucket", f.name + "_sum", f.name + "_count"}
	case "Summary":
		return []string{f.name, f.name + "_sum", f.name + "_count"}
	}
	return []string{f.name}
}

// definedMetrics returns the series the metric definitions under dirs make, as a
// scrape of a process that has used every one of them would show them.
func definedMetrics(dirs ...string) (Exposition, error) {
	fams, err := definedMetricFamilies(dirs...)
	if err != nil {
		return nil, err
	}
	e := Exposition{}
	for _, f := range fams {
		for _, s := range f.series() {
			ls := slices.Clone(f.labels)
			if strings.HasSuffix(s, "_bucket") {
				ls = append(ls, "le")
			}
			if f.kind == "Summary" && s == f.name {
				ls = append(ls, "quantile")
			}
			e[s] = ls
		}
	}
	return e, nil
}

// newMetric matches the constructors of k8s.io/component-base/metrics (and
// client_golang's, which take the same options).
var newMetric = map[string]string{
	"NewCounter": "Counter", "NewCounterVec": "Counter", "NewGauge": "Gauge", "NewGaugeVec": "Gauge",
	"NewHistogram": "Histogram", "NewHistogramVec": "Histogram", "NewSummary": "Summary", "NewSummaryVec": "Summary",
}

// definedMetricFamilies finds the metric definitions in the non-test Go files under
// dirs: calls of a metrics constructor with an options literal whose Namespace,
// Subsystem and Name are string literals or string constants of the package, and
// for vectors a []string literal of label names.
func definedMetricFamilies(dirs ...string) ([]metricFamily, error) {
	var out []metricFamily
	fset := token.NewFileSet()
	for _, dir := range dirs {
		byPkg := map[string][]*ast.File{}
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			byPkg[filepath.Dir(path)] = append(byPkg[filepath.Dir(path)], f)
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, files := range byPkg {
			consts := stringConsts(files)
			for _, f := range files {
				fams, err := metricCalls(fset, f, consts)
				if err != nil {
					return nil, err
				}
				out = append(out, fams...)
			}
		}
	}
	return out, nil
}

// stringConsts returns the package-level string constants of a package's files.
func stringConsts(files []*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := stringLit(vs.Values[i], nil); ok {
							out[name.Name] = s
						}
					}
				}
			}
		}
	}
	return out
}

func stringLit(e ast.Expr, consts map[string]string) (string, bool) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(v.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[v.Name]
		return s, ok
	}
	return "", false
}

func metricCalls(fset *token.FileSet, f *ast.File, consts map[string]string) ([]metricFamily, error) {
	var out []metricFamily
	var err error
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || err != nil {
			return err == nil
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || newMetric[sel.Sel.Name] == "" || len(call.Args) == 0 {
			return true
		}
		u, ok := call.Args[0].(*ast.UnaryExpr)
		if !ok || u.Op != token.AND {
			return true
		}
		lit, ok := u.X.(*ast.CompositeLit)
		if !ok {
			return true
		}
		if ts, ok := lit.Type.(*ast.SelectorExpr); !ok || !strings.HasSuffix(ts.Sel.Name, "Opts") {
			return true
		}
		pos := fset.Position(call.Pos()).String()
		fields := map[string]string{}
		for _, elt := range lit.Elts {
			kv, ok := elt.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, _ := kv.Key.(*ast.Ident)
			if key == nil || (key.Name != "Namespace" && key.Name != "Subsystem" && key.Name != "Name") {
				continue
			}
			s, ok := stringLit(kv.Value, consts)
			if !ok {
				err = fmt.Errorf("%s: %s of a metric is not a string constant", pos, key.Name)
				return false
			}
			fields[key.Name] = s
		}
		var parts []string
		for _, k := range []string{"Namespace", "Subsystem", "Name"} {
			if fields[k] != "" {
				parts = append(parts, fields[k])
			}
		}
		fam := metricFamily{name: strings.Join(parts, "_"), kind: newMetric[sel.Sel.Name], pos: pos}
		if strings.HasSuffix(sel.Sel.Name, "Vec") {
			if len(call.Args) < 2 {
				err = fmt.Errorf("%s: %s without label names", pos, sel.Sel.Name)
				return false
			}
			ls, ok := call.Args[1].(*ast.CompositeLit)
			if !ok {
				err = fmt.Errorf("%s: the label names are not a []string literal", pos)
				return false
			}
			for _, e := range ls.Elts {
				s, ok := stringLit(e, consts)
				if !ok {
					err = fmt.Errorf("%s: a label name is not a string constant", pos)
					return false
				}
				fam.labels = append(fam.labels, s)
			}
		}
		out = append(out, fam)
		return true
	})
	return out, err
}

// TestCollect: the references of a query are its selectors' metrics and matched
// labels, and the labels its by/without/on clauses need from the metrics under them.
func TestCollect(t *testing.T) {
	refs, err := Collect([]Query{
		{Where: "q1", Expr: `sum by (pool, family) (rate(a_total{result="error", job="x"}[5m])) / on (pool) group_left b`},
		{Where: "q2", Expr: `histogram_quantile(0.9, sum by (le) (rate(c_bucket[5m])))`},
		{Where: "q3", Expr: `count(a_total == 0) or vector(0)`},
		{Where: "q4", Expr: `{__name__="d", peer="p"}`},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := refs.Names(); !slices.Equal(got, []string{"a_total", "b", "c_bucket", "d"}) {
		t.Errorf("names %v", got)
	}
	if u := refs.Uses["a_total"]; !slices.Equal(u.Labels, []string{"result", "job"}) || !slices.Equal(u.Where, []string{"q1", "q3"}) {
		t.Errorf("a_total: %+v", u)
	}
	if u := refs.Uses["d"]; !slices.Equal(u.Labels, []string{"peer"}) {
		t.Errorf("d: %+v", u)
	}
	var needs []string
	for _, n := range refs.Needs {
		needs = append(needs, fmt.Sprintf("%s:%v:%s", n.Label, n.Metrics, n.Where))
	}
	want := []string{"pool:[a_total]:q1", "pool:[b]:q1", "pool:[a_total]:q1", "family:[a_total]:q1", "le:[c_bucket]:q2"}
	if !slices.Equal(needs, want) {
		t.Errorf("needs\n%v\nwant\n%v", needs, want)
	}

	_, err = Collect([]Query{{Where: "bad1", Expr: `sum(`}, {Where: "good", Expr: `up`}, {Where: "bad2", Expr: `rate(x[5m]`}})
	if err == nil || !strings.Contains(err.Error(), "bad1") || !strings.Contains(err.Error(), "bad2") {
		t.Errorf("errors of unparsable queries: %v, want both named", err)
	}
}

func TestExpandGrafanaVariables(t *testing.T) {
	got, err := ExpandGrafanaVariables(`rate(x{job=~"$job", instance=~"${instance}"}[$__rate_interval])`)
	if err != nil || got != `rate(x{job=~"baremetal-ccm", instance=~".+"}[5m])` {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := ExpandGrafanaVariables(`x{node="$node"}`); err == nil || !strings.Contains(err.Error(), "$node") {
		t.Errorf("an unknown variable: %v, want an error naming it", err)
	}
}

const sampleScrape = `# HELP baremetal_ccm_bgp_session_up 1 when the BGP session to the peer is established, else 0.
# TYPE baremetal_ccm_bgp_session_up gauge
baremetal_ccm_bgp_session_up{peer="10.0.0.1"} 1
# HELP baremetal_ccm_bmc_request_duration_seconds Latency of BMC calls.
# TYPE baremetal_ccm_bmc_request_duration_seconds histogram
baremetal_ccm_bmc_request_duration_seconds_bucket{operation="power_state",protocol="redfish",le="0.05"} 1
baremetal_ccm_bmc_request_duration_seconds_bucket{operation="power_state",protocol="redfish",le="+Inf"} 1
baremetal_ccm_bmc_request_duration_seconds_sum{operation="power_state",protocol="redfish"} 0.01
baremetal_ccm_bmc_request_duration_seconds_count{operation="power_state",protocol="redfish"} 1
# HELP baremetal_ccm_routes_reconcile_errors_total Routes the mirror failed.
# TYPE baremetal_ccm_routes_reconcile_errors_total counter
baremetal_ccm_routes_reconcile_errors_total 0
# HELP leader_election_master_status Leader or not.
# TYPE leader_election_master_status gauge
leader_election_master_status{name="cloud-controller-manager"} 1
`

// TestExpositionCheck: histogram series, counters and labels are found in a scrape;
// missing metrics and labels are reported; exempt and Prometheus's own metrics are
// not.
func TestExpositionCheck(t *testing.T) {
	e, err := ParseExposition(sampleScrape)
	if err != nil {
		t.Fatal(err)
	}
	if got := e["baremetal_ccm_bmc_request_duration_seconds_bucket"]; !slices.Equal(got, []string{"le", "operation", "protocol"}) {
		t.Errorf("bucket labels %v", got)
	}
	if got, ok := e["baremetal_ccm_bmc_request_duration_seconds_count"]; !ok || slices.Contains(got, "le") {
		t.Errorf("count labels %v (%v)", got, ok)
	}
	good := []Query{
		{Where: "ok1", Expr: `baremetal_ccm_bgp_session_up{peer="x"} == 0`},
		{Where: "ok2", Expr: `histogram_quantile(0.9, sum by (le, protocol) (rate(baremetal_ccm_bmc_request_duration_seconds_bucket{job="j"}[5m])))`},
		{Where: "ok3", Expr: `rate(baremetal_ccm_routes_reconcile_errors_total[5m]) + baremetal_ccm_bmc_request_duration_seconds_count`},
		{Where: "ok4", Expr: `max by (namespace, job) (baremetal_ccm_bgp_session_up unless on (job, instance) (leader_election_master_status == 0))`},
		{Where: "ok5", Expr: `absent(up{job="baremetal-ccm"} == 1)`},
		{Where: "ok6", Expr: `baremetal_ccm_exempt{reason="x"}`},
	}
	refs, err := Collect(good)
	if err != nil {
		t.Fatal(err)
	}
	exempt := map[string]string{"baremetal_ccm_exempt": "only with feature X"}
	if p := e.Check(refs, exempt); len(p) != 0 {
		t.Errorf("problems with valid queries:\n%s", strings.Join(p, "\n"))
	}
	refs, err = Collect(append(good,
		Query{Where: "bad1", Expr: `baremetal_ccm_bgp_session_up{peers="x"}`},
		Query{Where: "bad2", Expr: `sum by (pool) (baremetal_ccm_bgp_session_up)`},
		Query{Where: "bad3", Expr: `baremetal_ccm_bgp_sessions_up`},
		Query{Where: "bad4", Expr: `baremetal_ccm_bgp_session_up unless on (job, instance, peer) baremetal_ccm_routes_reconcile_errors_total`},
	))
	if err != nil {
		t.Fatal(err)
	}
	p := e.Check(refs, exempt)
	want := []string{
		`baremetal_ccm_bgp_session_up has no label "peers"`,
		`baremetal_ccm_bgp_sessions_up is not served (used by bad3)`,
		`label "peer" is on none of [baremetal_ccm_routes_reconcile_errors_total] (bad4)`,
		`label "pool" is on none of [baremetal_ccm_bgp_session_up] (bad2)`,
	}
	if len(p) != len(want) {
		t.Fatalf("problems:\n%s\nwant %d", strings.Join(p, "\n"), len(want))
	}
	for i := range want {
		if !strings.Contains(p[i], want[i]) {
			t.Errorf("problem %d: %q, want it to contain %q", i, p[i], want[i])
		}
	}
}
