package monitoring

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Exposition is a /metrics page as the queries see it: every series name (a
// histogram's _bucket, _sum and _count, a counter's name with its _total) with the
// label names its samples carry.
type Exposition map[string][]string

// ParseExposition parses a /metrics page in the Prometheus text format.
func ParseExposition(text string) (Exposition, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	e := Exposition{}
	for name, f := range families {
		var extra string
		series := []string{name}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			series, extra = []string{name + "_bucket", name + "_sum", name + "_count"}, "le"
		case dto.MetricType_SUMMARY:
			series, extra = []string{name, name + "_sum", name + "_count"}, "quantile"
		}
		var ls []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(ls, l.GetName()) {
					ls = append(ls, l.GetName())
				}
			}
		}
		for _, s := range series {
			have := slices.Clone(ls)
			if extra != "" && (strings.HasSuffix(s, "_bucket") || s == name) {
				have = append(have, extra)
			}
			sort.Strings(have)
			e[s] = have
		}
	}
	return e, nil
}

// Check holds refs against the exposition: every metric must be served (unless
// exempt, with the reason, or Synthetic), every label a selector matches must be
// on that metric's series, and every label a "by", "without" or "on" clause names
// must be on one of the metrics under it; target labels (TargetLabels) are
// always there. It returns the problems, one line each, sorted.
func (e Exposition) Check(refs *References, exempt map[string]string) []string {
	var problems []string
	for _, name := range refs.Names() {
		u := refs.Uses[name]
		if _, ok := Synthetic[name]; ok {
			continue
		}
		if _, ok := exempt[name]; ok {
			continue
		}
		have, ok := e[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is not served (used by %s)", name, strings.Join(u.Where, "; ")))
			continue
		}
		for _, l := range u.Labels {
			if !slices.Contains(have, l) && !slices.Contains(TargetLabels, l) {
				problems = append(problems, fmt.Sprintf("%s has no label %q (its labels: %v; matched by %s)", name, l, have, strings.Join(u.Where, "; ")))
			}
		}
	}
	for _, n := range refs.Needs {
		if slices.Contains(TargetLabels, n.Label) {
			continue
		}
		found, known := false, false
		for _, m := range n.Metrics {
			_, syn := Synthetic[m]
			_, ex := exempt[m]
			if syn || ex {
				// Not served here: nothing to hold the label against.
				found = true
				continue
			}
			have, ok := e[m]
			known = known || ok
			if slices.Contains(have, n.Label) {
				found = true
			}
		}
		if !found && known {
			problems = append(problems, fmt.Sprintf("label %q is on none of %v (%s)", n.Label, n.Metrics, n.Where))
		}
	}
	sort.Strings(problems)
	return slices.Compact(problems)
}
