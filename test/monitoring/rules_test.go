package monitoring

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// TestPromtool checks the rule file and runs its unit tests (rules_test.yml) with
// Prometheus's own promtool, and checks the PrometheusRule's groups the same way.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH, so the rules are not evaluated here (Debian 12: apt-get install --no-install-recommends prometheus, which hack/deps.sh does; CI has it)")
	}
	dir := filepath.Join(root(t), filepath.Dir(RulesFile))
	run := func(t *testing.T, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
	t.Run("check rules.yml", func(t *testing.T) {
		run(t, "check", "rules", filepath.Base(RulesFile))
	})
	t.Run("check the PrometheusRule's groups", func(t *testing.T) {
		pr := parsePrometheusRule(t, read(t, PrometheusRuleFile))
		data, err := yaml.Marshal(pr.Spec)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "spec.yml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, "check", "rules", path)
	})
	t.Run("test rules_test.yml", func(t *testing.T) {
		run(t, "test", "rules", filepath.Base(RulesTestFile))
	})
}

// prometheusRule is the PrometheusRule custom resource.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec RuleFile `json:"spec"`
}

func parsePrometheusRule(t *testing.T, data []byte) *prometheusRule {
	t.Helper()
	var pr prometheusRule
	if err := yaml.UnmarshalStrict(data, &pr); err != nil {
		t.Fatalf("%s: %v", PrometheusRuleFile, err)
	}
	return &pr
}

const prometheusRuleHeader = `# Generated from rules.yml by go test ./test/monitoring -update: edit rules.yml, not
# this file. The same alerting rules as a PrometheusRule for the Prometheus operator;
# rules.yml explains what they assume. Your Prometheus's ruleSelector may want a
# label of its own (kube-prometheus-stack: release=<its release name>).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: baremetal-ccm
  namespace: kube-system
  labels:
    app.kubernetes.io/name: baremetal-ccm
    app.kubernetes.io/component: alerting-rules
spec:
`

// renderPrometheusRule wraps the rule file's groups, text for text, in a
// PrometheusRule.
func renderPrometheusRule(rules []byte) ([]byte, error) {
	i := bytes.Index(rules, []byte("\ngroups:\n"))
	if i < 0 {
		return nil, fmt.Errorf("%s: no top-level groups: key", RulesFile)
	}
	var b bytes.Buffer
	b.WriteString(prometheusRuleHeader)
	for _, line := range strings.SplitAfter(string(rules[i+1:]), "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes(), nil
}

// TestPrometheusRule: prometheus-rules.yaml is a PrometheusRule named baremetal-ccm
// in kube-system whose groups are exactly rules.yml's.
func TestPrometheusRule(t *testing.T) {
	rulesData := read(t, RulesFile)
	want, err := renderPrometheusRule(rulesData)
	if err != nil {
		t.Fatal(err)
	}
	checkGenerated(t, PrometheusRuleFile, want)

	rules, err := ParseRules(rulesData)
	if err != nil {
		t.Fatal(err)
	}
	pr := parsePrometheusRule(t, read(t, PrometheusRuleFile))
	if pr.APIVersion != PrometheusRuleGroup || pr.Kind != "PrometheusRule" || pr.Metadata.Name != PrometheusRuleName || pr.Metadata.Namespace != PrometheusRuleNS {
		t.Errorf("%s is %s %s %s/%s, want %s PrometheusRule %s/%s", PrometheusRuleFile, pr.APIVersion, pr.Kind,
			pr.Metadata.Namespace, pr.Metadata.Name, PrometheusRuleGroup, PrometheusRuleNS, PrometheusRuleName)
	}
	if !reflect.DeepEqual(pr.Spec, *rules) {
		t.Errorf("the PrometheusRule's groups differ from %s", RulesFile)
	}
	if len(rules.Alerts()) == 0 {
		t.Fatalf("%s has no alerts", RulesFile)
	}
}

// TestAlertConventions: every alert has a severity, a summary, a description and a
// runbook_url pointing at its own section of runbooks.md, a "for" duration, and a
// unique name; every section of runbooks.md belongs to an alert.
func TestAlertConventions(t *testing.T) {
	rules, err := ParseRules(read(t, RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	anchors := runbookAnchors(string(read(t, RunbooksFile)))
	seen := map[string]bool{}
	for _, r := range rules.Alerts() {
		if seen[r.Alert] {
			t.Errorf("alert %s is defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if !strings.HasPrefix(r.Alert, "BaremetalCCM") {
			t.Errorf("alert %s: the names start with BaremetalCCM", r.Alert)
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
		}
		var keys []string
		for k, v := range r.Annotations {
			keys = append(keys, k)
			if strings.TrimSpace(v) == "" {
				t.Errorf("alert %s: empty annotation %s", r.Alert, k)
			}
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"description", "runbook_url", "summary"}) {
			t.Errorf("alert %s: annotations %v, want description, runbook_url and summary", r.Alert, keys)
		}
		anchor := strings.ToLower(r.Alert)
		if want := RunbookURLPrefix + anchor; r.Annotations["runbook_url"] != want {
			t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if !anchors[anchor] {
			t.Errorf("alert %s: %s has no section \"## %s\"", r.Alert, RunbooksFile, r.Alert)
		}
		if d, err := model.ParseDuration(r.For); err != nil || d == 0 {
			t.Errorf("alert %s: for %q, want a duration (a single failed scrape or evaluation must not page)", r.Alert, r.For)
		}
	}
	for a := range anchors {
		found := false
		for name := range seen {
			found = found || strings.ToLower(name) == a
		}
		if !found {
			t.Errorf("%s has a section #%s for no alert", RunbooksFile, a)
		}
	}
}

var runbookHeading = regexp.MustCompile(`(?m)^## (BaremetalCCM\w+)\s*$`)

// runbookAnchors returns the GitHub anchors of the alert sections of runbooks.md.
func runbookAnchors(md string) map[string]bool {
	out := map[string]bool{}
	for _, m := range runbookHeading.FindAllStringSubmatch(md, -1) {
		out[strings.ToLower(m[1])] = true
	}
	return out
}

// promtoolTests is a promtool unit test file.
type promtoolTests struct {
	RuleFiles          []string `json:"rule_files"`
	EvaluationInterval string   `json:"evaluation_interval"`
	Tests              []struct {
		Name        string `json:"name"`
		Interval    string `json:"interval"`
		InputSeries []struct {
			Series string `json:"series"`
			Values string `json:"values"`
		} `json:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `json:"exp_labels"`
				ExpAnnotations map[string]string `json:"exp_annotations"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertTested: rules_test.yml tests rules.yml; each alert has a case where
// it fires, with its severity and every annotation, and one where it must not; the
// input series are metrics the rules read, so a misspelt series cannot make a
// "must not fire" case pass by itself.
func TestEveryAlertTested(t *testing.T) {
	rules, err := ParseRules(read(t, RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var tests promtoolTests
	if err := yaml.UnmarshalStrict(read(t, RulesTestFile), &tests); err != nil {
		t.Fatalf("%s: %v", RulesTestFile, err)
	}
	if !slices.Equal(tests.RuleFiles, []string{filepath.Base(RulesFile)}) {
		t.Errorf("%s tests %v, want [%s]", RulesTestFile, tests.RuleFiles, filepath.Base(RulesFile))
	}
	refs, err := Collect(rules.Queries(RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	severity := map[string]string{}
	for _, r := range rules.Alerts() {
		severity[r.Alert] = r.Labels["severity"]
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, s := range tc.InputSeries {
			ms, err := parser.ParseMetricSelector(s.Series)
			if err != nil {
				t.Errorf("test %q: series %s: %v", tc.Name, s.Series, err)
				continue
			}
			for _, m := range ms {
				if m.Name == "__name__" && refs.Uses[m.Value] == nil {
					t.Errorf("test %q: series %s is no metric the rules read", tc.Name, s.Series)
				}
			}
		}
		for _, a := range tc.AlertRuleTest {
			sev, ok := severity[a.Alertname]
			if !ok {
				t.Errorf("test %q: no alert %s in %s", tc.Name, a.Alertname, RulesFile)
				continue
			}
			if len(a.ExpAlerts) == 0 {
				quiet[a.Alertname] = true
			}
			for _, e := range a.ExpAlerts {
				fires[a.Alertname] = true
				if e.ExpLabels["severity"] != sev {
					t.Errorf("test %q: %s expected with severity %q, the rule says %q", tc.Name, a.Alertname, e.ExpLabels["severity"], sev)
				}
				for _, k := range []string{"summary", "description", "runbook_url"} {
					if e.ExpAnnotations[k] == "" {
						t.Errorf("test %q at %s: %s expected without annotation %s", tc.Name, a.EvalTime, a.Alertname, k)
					}
				}
			}
		}
	}
	for alert := range severity {
		if !fires[alert] {
			t.Errorf("%s has no case where %s fires", RulesTestFile, alert)
		}
		if !quiet[alert] {
			t.Errorf("%s has no case where %s must not fire", RulesTestFile, alert)
		}
	}
}
