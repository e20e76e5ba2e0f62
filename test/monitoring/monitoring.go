// Package monitoring reads the alerting rules and the Grafana dashboard shipped in
// packaging/monitoring and finds the metrics and labels their PromQL uses, so that
// tests can hold them against the metrics the CCM defines (this package's unit
// tests read the source) and the metrics a running CCM serves (the e2e test
// TestMonitoringMetricsExist scrapes one).
package monitoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// The shipped files, relative to the module root.
const (
	RulesFile           = "packaging/monitoring/rules.yml"
	PrometheusRuleFile  = "packaging/monitoring/prometheus-rules.yaml"
	RulesTestFile       = "packaging/monitoring/rules_test.yml"
	DashboardFile       = "packaging/monitoring/grafana-dashboard.json"
	RunbooksFile        = "packaging/monitoring/runbooks.md"
	RunbookURLPrefix    = "https://github.com/baremetal-ccm/baremetal-ccm/blob/main/" + RunbooksFile + "#"
	DatasourceVariable  = "${datasource}"
	DashboardUID        = "baremetal-ccm"
	PrometheusRuleName  = "baremetal-ccm"
	PrometheusRuleNS    = "kube-system"
	PrometheusRuleGroup = "monitoring.coreos.com/v1"
)

// TargetLabels are the labels Prometheus attaches to every series of a target
// (job and instance always; namespace and pod with the Prometheus operator's
// service discovery). The rules and the dashboard may match and group by them on
// any metric: the CCM's /metrics does not carry them.
var TargetLabels = []string{"job", "instance", "namespace", "pod"}

// Synthetic are the metrics the rules and the dashboard use that Prometheus itself
// makes, never the CCM, with the reason.
var Synthetic = map[string]string{
	"up": "written by Prometheus for every scrape of a target (1 when it succeeded)",
}

// RuleFile is a Prometheus rule file.
type RuleFile struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of a rule file.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is an alerting or recording rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Alerts returns the alerting rules of every group, in file order.
func (f *RuleFile) Alerts() []Rule {
	var out []Rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// Queries returns every rule's expression, named by its group and alert or record.
func (f *RuleFile) Queries(file string) []Query {
	var out []Query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			out = append(out, Query{Where: fmt.Sprintf("%s: group %s, rule %s", file, g.Name, name), Expr: r.Expr})
		}
	}
	return out
}

// ParseRules decodes a rule file strictly (an unknown field is an error).
func ParseRules(data []byte) (*RuleFile, error) {
	var f RuleFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// Root returns the module root: the nearest directory above the working directory
// (a test's package directory) holding go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod in %s or any parent directory", dir)
		}
	}
}

// Query is one PromQL expression and where it comes from.
type Query struct {
	Where string
	Expr  string
}

// grafanaVariables are the values the dashboard's variables take when its
// expressions are parsed: the built-in intervals and the dashboard's own.
var grafanaVariables = map[string]string{
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__range":         "1h",
	"job":             "baremetal-ccm",
	"instance":        ".+",
}

var grafanaVariable = regexp.MustCompile(`\$(\{[A-Za-z0-9_]+\}|[A-Za-z0-9_]+)`)

// ExpandGrafanaVariables replaces the dashboard's variables ($job, ${job},
// $__rate_interval…) in expr by values PromQL accepts. An unknown variable is an
// error.
func ExpandGrafanaVariables(expr string) (string, error) {
	var unknown []string
	out := grafanaVariable.ReplaceAllStringFunc(expr, func(m string) string {
		name := strings.Trim(m[1:], "{}")
		v, ok := grafanaVariables[name]
		if !ok {
			unknown = append(unknown, m)
			return m
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown dashboard variables %v", unknown)
	}
	return out, nil
}

// Use is what the queries use of one metric.
type Use struct {
	// Metric is the name as written in the query (histogram series with their
	// _bucket, _sum or _count suffix, counters with _total).
	Metric string
	// Labels are the labels the queries match on this metric's selectors.
	Labels []string
	// Where lists the queries that use it.
	Where []string
}

// LabelNeed is a label that must exist on at least one of Metrics (or be a
// target label): a "by", "without" or "on" clause over an expression that selects
// Metrics.
type LabelNeed struct {
	Label   string
	Metrics []string
	Where   string
}

// References are the metrics and labels a set of queries uses.
type References struct {
	Uses  map[string]*Use
	Needs []LabelNeed
}

// Names returns the metric names, sorted.
func (r *References) Names() []string {
	var out []string
	for n := range r.Uses {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Collect parses every query and returns what they use. Queries that do not parse
// are reported, all at once.
func Collect(queries []Query) (*References, error) {
	refs := &References{Uses: map[string]*Use{}}
	var errs []error
	for _, q := range queries {
		expr, err := parser.ParseExpr(q.Expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.Where, err))
			continue
		}
		if err := refs.add(q.Where, expr); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.Where, err))
		}
	}
	return refs, errors.Join(errs...)
}

func (r *References) add(where string, expr parser.Expr) error {
	var err error
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			name := selectorName(n)
			if name == "" {
				err = fmt.Errorf("selector %s names no metric", n)
				return err
			}
			u := r.Uses[name]
			if u == nil {
				u = &Use{Metric: name}
				r.Uses[name] = u
			}
			if !slices.Contains(u.Where, where) {
				u.Where = append(u.Where, where)
			}
			for _, m := range n.LabelMatchers {
				if m.Name != model.MetricNameLabel && !slices.Contains(u.Labels, m.Name) {
					u.Labels = append(u.Labels, m.Name)
				}
			}
		case *parser.AggregateExpr:
			r.need(n.Grouping, metricsIn(n.Expr), where)
		case *parser.BinaryExpr:
			if vm := n.VectorMatching; vm != nil && vm.On {
				r.need(vm.MatchingLabels, metricsIn(n.LHS), where)
				r.need(vm.MatchingLabels, metricsIn(n.RHS), where)
			}
		}
		return nil
	})
	return err
}

func (r *References) need(ls, metrics []string, where string) {
	if len(metrics) == 0 {
		return // over a literal (vector(0)): nothing to hold it against
	}
	for _, l := range ls {
		r.Needs = append(r.Needs, LabelNeed{Label: l, Metrics: metrics, Where: where})
	}
}

func selectorName(s *parser.VectorSelector) string {
	if s.Name != "" {
		return s.Name
	}
	for _, m := range s.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

// metricsIn returns the metric names selected anywhere in expr.
func metricsIn(expr parser.Expr) []string {
	var out []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if s, ok := node.(*parser.VectorSelector); ok {
			if n := selectorName(s); n != "" && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// Shipped loads the rule file and the dashboard under root and returns everything
// their queries use.
func Shipped(root string) (*References, error) {
	rulesData, err := os.ReadFile(filepath.Join(root, RulesFile))
	if err != nil {
		return nil, err
	}
	rules, err := ParseRules(rulesData)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", RulesFile, err)
	}
	dashData, err := os.ReadFile(filepath.Join(root, DashboardFile))
	if err != nil {
		return nil, err
	}
	dash, err := ParseDashboard(dashData)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	dq, err := dash.Queries(DashboardFile)
	if err != nil {
		return nil, err
	}
	return Collect(append(rules.Queries(RulesFile), dq...))
}

// Dashboard is the part of a Grafana dashboard model the checks read.
type Dashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	SchemaVersion int        `json:"schemaVersion"`
	Panels        []Panel    `json:"panels"`
	Templating    Templating `json:"templating"`
}

// Templating holds the dashboard's variables.
type Templating struct {
	List []Variable `json:"list"`
}

// Variable is a dashboard variable.
type Variable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
}

// Panel is a dashboard panel; a row holds its own panels when collapsed.
type Panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *Datasource `json:"datasource,omitempty"`
	GridPos    GridPos     `json:"gridPos"`
	Targets    []Target    `json:"targets,omitempty"`
	Panels     []Panel     `json:"panels,omitempty"`
}

// GridPos places a panel on the dashboard's 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Datasource references a data source by type and uid.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat,omitempty"`
	Datasource   *Datasource `json:"datasource,omitempty"`
}

// ParseDashboard decodes a dashboard's JSON model.
func ParseDashboard(data []byte) (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// AllPanels returns every panel, rows' panels included, in order.
func (d *Dashboard) AllPanels() []Panel {
	var out []Panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

// Queries returns every target's expression, and the selector of every query
// variable's label_values(selector, label), with the dashboard's variables
// expanded.
func (d *Dashboard) Queries(file string) ([]Query, error) {
	var out []Query
	var errs []error
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := fmt.Sprintf("%s: variable %s", file, v.Name)
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		selector, err := labelValuesSelector(s)
		if err == nil {
			selector, err = ExpandGrafanaVariables(selector)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		out = append(out, Query{Where: where, Expr: selector})
	}
	for _, p := range d.AllPanels() {
		for _, t := range p.Targets {
			where := fmt.Sprintf("%s: panel %q, target %s", file, p.Title, t.RefID)
			expr, err := ExpandGrafanaVariables(t.Expr)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				continue
			}
			out = append(out, Query{Where: where, Expr: expr})
		}
	}
	return out, errors.Join(errs...)
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$`)

// labelValuesSelector returns the selector of a label_values(selector, label)
// variable query whose label is a target label.
func labelValuesSelector(q string) (string, error) {
	m := labelValues.FindStringSubmatch(strings.TrimSpace(q))
	if m == nil {
		return "", fmt.Errorf("query %q is not label_values(selector, label)", q)
	}
	if !slices.Contains(TargetLabels, m[2]) {
		return "", fmt.Errorf("query %q: %s is not a target label %v", q, m[2], TargetLabels)
	}
	return m[1], nil
}
