package monitoring

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The dashboard is generated from the definitions below (run go test
// ./test/monitoring -update after changing them): its layout, datasource references
// and ids stay consistent, and every query is the same PromQL the checks parse.

// sel selects the replicas chosen in the dashboard's variables.
const sel = `job=~"$job", instance=~"$instance"`

// leaderOnly leaves out the replicas that do not lead (a replica that lost its
// Lease keeps the last values of the leader's gauges); without leader election
// there is no such metric and nothing is left out.
const leaderOnly = `unless on (job, instance) (leader_election_master_status == 0)`

type panelKind string

const (
	timeseries    panelKind = "timeseries"
	stat          panelKind = "stat"
	bargauge      panelKind = "bargauge"
	stateTimeline panelKind = "state-timeline"
	table         panelKind = "table"
)

type panelDef struct {
	kind        panelKind
	title       string
	description string
	unit        string
	w, h        int
	targets     []targetDef
	// thresholds: the value from which the panel turns orange and red (0: none);
	// okAt: the panel is red below it and green from it (0: none).
	warn, crit, okAt float64
	// upDown maps 1 to "Up" (green) and 0 to "Down" (red).
	upDown bool
	// showName shows the series' legend instead of its value (stat).
	showName bool
	max      *float64
}

type targetDef struct {
	expr, legend string
}

type rowDef struct {
	title  string
	panels []panelDef
}

func one(expr, legend string) []targetDef { return []targetDef{{expr, legend}} }

var ratioMax = 1.0

var dashboardRows = []rowDef{
	{"Overview", []panelDef{
		{kind: stat, title: "Replicas up", w: 4, h: 4, okAt: 1, description: "Replicas Prometheus scrapes successfully.",
			targets: one(`sum(up{job=~"$job"})`, "")},
		{kind: stat, title: "Leader", w: 4, h: 4, showName: true, description: "The replica holding the leader Lease (empty without leader election).",
			targets: one(`leader_election_master_status{job=~"$job"} == 1`, "{{instance}}")},
		{kind: stat, title: "Services waiting for an IP", w: 4, h: 4, warn: 1, description: "LoadBalancer Services without an address (leader).",
			targets: one(`max(baremetal_ccm_lb_services_pending{job=~"$job"} `+leaderOnly+`)`, "")},
		{kind: stat, title: "Oldest waiting Service", unit: "s", w: 4, h: 4, warn: 60, crit: 300, description: "How long the oldest LoadBalancer Service without an address has waited.",
			targets: one(`max(baremetal_ccm_lb_oldest_pending_service_seconds{job=~"$job"} `+leaderOnly+`)`, "")},
		{kind: stat, title: "BMCs unreachable", w: 4, h: 4, warn: 1, description: "BMCs whose latest call failed (leader).",
			targets: one(`max(baremetal_ccm_bmc_unreachable{job=~"$job"} `+leaderOnly+`)`, "")},
		{kind: stat, title: "Hosts held by the deletion guard", w: 4, h: 4, warn: 1, description: "Hosts a held inventory change would report gone; acknowledge the trip to accept it.",
			targets: one(`max(baremetal_ccm_inventory_deletion_guard_held_hosts{job=~"$job"} `+leaderOnly+`)`, "")},
		{kind: stat, title: "BGP sessions down", w: 4, h: 4, warn: 1, description: "Sessions of the selected replicas that are not established.",
			targets: one(`count(baremetal_ccm_bgp_session_up{`+sel+`} == 0) or vector(0)`, "")},
		{kind: stat, title: "BFD sessions down", w: 4, h: 4, warn: 1, description: "BFD sessions of the selected replicas that are not Up.",
			targets: one(`count(baremetal_ccm_bfd_session_up{`+sel+`} == 0) or vector(0)`, "")},
		{kind: stat, title: "Power-based actions waiting", w: 4, h: 4, warn: 1, description: "Powered-off hosts waiting for an acknowledgement of the power-off budget (leader).",
			targets: one(`max(baremetal_ccm_power_budget_waiting_hosts{job=~"$job"} `+leaderOnly+`)`, "")},
		{kind: stat, title: "Inventory reloads failing", w: 4, h: 4, warn: 1, description: "Replicas whose latest inventory reload failed.",
			targets: one(`sum(baremetal_ccm_inventory_last_reload_failed{`+sel+`})`, "")},
		{kind: stat, title: "Unhealthy node health endpoints", w: 4, h: 4, warn: 1, description: "Node health endpoints failing (bgp.nodeHealthCheck): their next hops are withdrawn.",
			targets: one(`max(baremetal_ccm_node_health_unhealthy_targets{`+sel+`})`, "")},
		{kind: stat, title: "Versions", w: 4, h: 4, showName: true, description: "Replicas per version.",
			targets: one(`count by (version) (baremetal_ccm_build_info{`+sel+`})`, "{{version}}")},
	}},
	{"BGP", []panelDef{
		{kind: stateTimeline, title: "BGP sessions", w: 12, h: 8, upDown: true, description: "Each replica's session with each router (baremetal_ccm_bgp_session_up).",
			targets: one(`baremetal_ccm_bgp_session_up{`+sel+`}`, "{{instance}} → {{peer}}")},
		{kind: timeseries, title: "Prefixes announced", w: 12, h: 8, description: "Paths advertised to each router, by family; no series while a session is down.",
			targets: one(`baremetal_ccm_bgp_prefixes_announced{`+sel+`}`, "{{instance}} → {{peer}} {{family}}")},
		{kind: timeseries, title: "Paths the speakers want announced", w: 12, h: 8, description: "By source: lb (LoadBalancer IPs), podcidr.",
			targets: one(`baremetal_ccm_bgp_paths{`+sel+`}`, "{{instance}} {{source}}")},
		{kind: timeseries, title: "BGP session state changes", w: 12, h: 8, description: "Transitions per interval, by peer and new state.",
			targets: one(`sum by (instance, peer, state) (increase(baremetal_ccm_bgp_session_state_changes_total{`+sel+`}[$__rate_interval]))`, "{{instance}} → {{peer}} {{state}}")},
	}},
	{"BFD", []panelDef{
		{kind: stateTimeline, title: "BFD sessions", w: 12, h: 8, upDown: true, description: "Each replica's BFD session with each router (bgp.peers[].bfd).",
			targets: one(`baremetal_ccm_bfd_session_up{`+sel+`}`, "{{instance}} → {{peer}}")},
		{kind: timeseries, title: "BFD state changes", w: 6, h: 8, description: "Transitions per interval, by peer and new state.",
			targets: one(`sum by (instance, peer, state) (increase(baremetal_ccm_bfd_session_state_changes_total{`+sel+`}[$__rate_interval]))`, "{{instance}} → {{peer}} {{state}}")},
		{kind: timeseries, title: "BFD packets dropped", unit: "pps", w: 6, h: 8, description: "Received packets discarded, by reason (ttl: a router more than one hop away; unknown_session: a neighbor not configured here).",
			targets: one(`sum by (instance, reason) (rate(baremetal_ccm_bfd_received_packets_dropped_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{reason}}")},
	}},
	{"Load balancer pools", []panelDef{
		{kind: bargauge, title: "Pool usage", unit: "percentunit", w: 8, h: 8, warn: 0.8, crit: 0.9, max: &ratioMax, description: "Share of each pool's addresses assigned to Services (leader).",
			targets: one(`max by (pool, family) ((baremetal_ccm_lb_pool_addresses_in_use{job=~"$job"} / baremetal_ccm_lb_pool_addresses{job=~"$job"}) `+leaderOnly+`)`, "{{pool}} {{family}}")},
		{kind: timeseries, title: "Free addresses", w: 8, h: 8, description: "Addresses left in each pool (IPv6 pools are capped at 2^64-1).",
			targets: one(`max by (pool, family) ((baremetal_ccm_lb_pool_addresses{job=~"$job"} - baremetal_ccm_lb_pool_addresses_in_use{job=~"$job"}) `+leaderOnly+`)`, "{{pool}} {{family}}")},
		{kind: timeseries, title: "Services waiting for an IP", w: 8, h: 8, description: "LoadBalancer Services without an address; kubectl describe svc says why.",
			targets: one(`max(baremetal_ccm_lb_services_pending{job=~"$job"} `+leaderOnly+`)`, "waiting")},
		{kind: timeseries, title: "Oldest waiting Service", unit: "s", w: 8, h: 8, description: "How long the oldest Service without an address has waited.",
			targets: one(`max(baremetal_ccm_lb_oldest_pending_service_seconds{job=~"$job"} `+leaderOnly+`)`, "oldest")},
		{kind: timeseries, title: "Addresses in use", w: 8, h: 8, description: "Addresses assigned in each pool.",
			targets: one(`max by (pool, family) (baremetal_ccm_lb_pool_addresses_in_use{job=~"$job"} `+leaderOnly+`)`, "{{pool}} {{family}}")},
		{kind: table, title: "IPs outside the pools", w: 8, h: 8, description: "Services holding IPs no pool contains any more (left assigned, not announced).",
			targets: one(`baremetal_ccm_lb_service_ips_outside_pools{job=~"$job"} `+leaderOnly, "{{namespace}}/{{service}}")},
	}},
	{"BMCs", []panelDef{
		{kind: timeseries, title: "BMC requests", unit: "reqps", w: 8, h: 8, description: "Power-state requests by protocol and result (success, error, unknown, cached, backoff).",
			targets: one(`sum by (protocol, result) (rate(baremetal_ccm_bmc_requests_total{`+sel+`}[$__rate_interval]))`, "{{protocol}} {{result}}")},
		{kind: timeseries, title: "BMC call latency", unit: "s", w: 8, h: 8, description: "Quantiles of BMC call duration, by protocol.",
			targets: []targetDef{
				{`histogram_quantile(0.5, sum by (le, protocol) (rate(baremetal_ccm_bmc_request_duration_seconds_bucket{` + sel + `}[$__rate_interval])))`, "p50 {{protocol}}"},
				{`histogram_quantile(0.95, sum by (le, protocol) (rate(baremetal_ccm_bmc_request_duration_seconds_bucket{` + sel + `}[$__rate_interval])))`, "p95 {{protocol}}"},
				{`histogram_quantile(0.99, sum by (le, protocol) (rate(baremetal_ccm_bmc_request_duration_seconds_bucket{` + sel + `}[$__rate_interval])))`, "p99 {{protocol}}"},
			}},
		{kind: timeseries, title: "BMCs unreachable", w: 8, h: 8, description: "BMCs whose latest call failed, per replica (the leader calls them).",
			targets: one(`baremetal_ccm_bmc_unreachable{`+sel+`}`, "{{instance}}")},
	}},
	{"Inventory", []panelDef{
		{kind: timeseries, title: "Inventory reloads", unit: "ops", w: 8, h: 8, description: "Reloads by result: loaded, unchanged, guarded (held by the deletion guard), error.",
			targets: one(`sum by (instance, result) (rate(baremetal_ccm_inventory_reloads_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{result}}")},
		{kind: timeseries, title: "Reload duration (p95)", unit: "s", w: 8, h: 8, description: "Fetch, parse and apply.",
			targets: one(`histogram_quantile(0.95, sum by (le, instance) (rate(baremetal_ccm_inventory_reload_duration_seconds_bucket{`+sel+`}[$__rate_interval])))`, "{{instance}}")},
		{kind: timeseries, title: "Since the last successful reload", unit: "s", w: 8, h: 8, description: "Grows while reloads fail or stall.",
			targets: one(`time() - baremetal_ccm_inventory_last_successful_reload_timestamp_seconds{`+sel+`}`, "{{instance}}")},
		{kind: timeseries, title: "Hosts by state", w: 8, h: 8, description: "Hosts in the inventory in use.",
			targets: one(`max by (state) (baremetal_ccm_inventory_hosts{`+sel+`})`, "{{state}}")},
		{kind: timeseries, title: "Deletion guard", w: 8, h: 8, description: "Tripped (1 while a change is held), the hosts it holds, a shrinking document settling, removals accepted within the window (leader).",
			targets: []targetDef{
				{`max(baremetal_ccm_inventory_deletion_guard_tripped{job=~"$job"} ` + leaderOnly + `)`, "tripped"},
				{`max(baremetal_ccm_inventory_deletion_guard_held_hosts{job=~"$job"} ` + leaderOnly + `)`, "held hosts"},
				{`max(baremetal_ccm_inventory_settling{job=~"$job"} ` + leaderOnly + `)`, "settling"},
				{`max(baremetal_ccm_inventory_removals_in_window{job=~"$job"} ` + leaderOnly + `)`, "removals in window"},
			}},
		{kind: timeseries, title: "Power-off budget", w: 8, h: 8, description: "Power-based actions granted within the window, and hosts waiting for an acknowledgement (leader).",
			targets: []targetDef{
				{`max(baremetal_ccm_power_budget_used_hosts{job=~"$job"} ` + leaderOnly + `)`, "used"},
				{`max(baremetal_ccm_power_budget_waiting_hosts{job=~"$job"} ` + leaderOnly + `)`, "waiting"},
			}},
		{kind: stat, title: "Remediation storm", w: 4, h: 8, warn: 1, description: "1 while more Nodes are unhealthy than instances.maxUnhealthy, or during instances.stormCooldown after: every power-based action (out-of-service taint, deleteAfter) is held (leader).",
			targets: one(`max(baremetal_ccm_remediation_storm{job=~"$job"} `+leaderOnly+`)`, "")},
		{kind: timeseries, title: "Unhealthy Nodes", w: 20, h: 8, description: "Initialized Nodes of inventory hosts that are not Ready and not in maintenance, against instances.maxUnhealthy resolved (leader); above it, power-based actions are held.",
			targets: []targetDef{
				{`max(baremetal_ccm_remediation_unhealthy_nodes{job=~"$job"} ` + leaderOnly + `)`, "unhealthy"},
				{`max(baremetal_ccm_remediation_max_unhealthy_nodes{job=~"$job"} ` + leaderOnly + `)`, "max unhealthy"},
			}},
	}},
	{"Routes", []panelDef{
		{kind: timeseries, title: "Pod-CIDR routes", w: 6, h: 8, description: "Routes of ours in each replica's kernel, and routes not programmed (self, offlink).",
			targets: []targetDef{
				{`baremetal_ccm_routes_programmed{` + sel + `}`, "{{instance}} programmed"},
				{`baremetal_ccm_routes_skipped{` + sel + `}`, "{{instance}} skipped ({{reason}})"},
			}},
		{kind: timeseries, title: "Route changes", unit: "ops", w: 6, h: 8, description: "Kernel route changes by operation and result.",
			targets: one(`sum by (instance, operation, result) (rate(baremetal_ccm_routes_operations_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{operation}} {{result}}")},
		{kind: timeseries, title: "Route errors", unit: "ops", w: 6, h: 8, description: "Routes the mirror failed to program or compute, and route dumps the kernel interrupted.",
			targets: []targetDef{
				{`rate(baremetal_ccm_routes_reconcile_errors_total{` + sel + `}[$__rate_interval])`, "{{instance}} failed"},
				{`rate(baremetal_ccm_routes_dump_retries_total{` + sel + `}[$__rate_interval])`, "{{instance}} dump retried"},
			}},
		{kind: timeseries, title: "Mirror pass duration", unit: "s", w: 6, h: 8, description: "Duration of the latest route mirror pass.",
			targets: one(`baremetal_ccm_routes_last_reconcile_duration_seconds{`+sel+`}`, "{{instance}}")},
	}},
	{"Node health", []panelDef{
		{kind: timeseries, title: "Unhealthy node health endpoints", w: 12, h: 8, description: "Endpoints failing now (kube-proxy /healthz, Local Services' healthCheckNodePort); their nodes are out of those Services' next hops.",
			targets: one(`baremetal_ccm_node_health_unhealthy_targets{`+sel+`}`, "{{instance}}")},
		{kind: timeseries, title: "Node health probes", unit: "ops", w: 12, h: 8, description: "Probes by result.",
			targets: one(`sum by (instance, result) (rate(baremetal_ccm_node_health_probes_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{result}}")},
	}},
	{"Process", []panelDef{
		{kind: timeseries, title: "Informer event handlers", w: 12, h: 8, description: "Event handlers on each replica's shared informers (its agent's and its current leadership term's). Flat across terms; a step up at every term means a term leaves handlers behind.",
			targets: one(`baremetal_ccm_informer_event_handlers{`+sel+`}`, "{{instance}}")},
	}},
}

// The JSON model, in Grafana's key order.

type jsonDashboard struct {
	Annotations   map[string]any `json:"annotations"`
	Description   string         `json:"description"`
	Editable      bool           `json:"editable"`
	GraphTooltip  int            `json:"graphTooltip"`
	Links         []any          `json:"links"`
	Panels        []jsonPanel    `json:"panels"`
	Refresh       string         `json:"refresh"`
	SchemaVersion int            `json:"schemaVersion"`
	Tags          []string       `json:"tags"`
	Templating    map[string]any `json:"templating"`
	Time          map[string]any `json:"time"`
	Timezone      string         `json:"timezone"`
	Title         string         `json:"title"`
	UID           string         `json:"uid"`
	Version       int            `json:"version"`
}

type jsonPanel struct {
	Collapsed   *bool          `json:"collapsed,omitempty"`
	Datasource  *Datasource    `json:"datasource,omitempty"`
	Description string         `json:"description,omitempty"`
	FieldConfig map[string]any `json:"fieldConfig,omitempty"`
	GridPos     GridPos        `json:"gridPos"`
	ID          int            `json:"id"`
	Options     map[string]any `json:"options,omitempty"`
	Panels      []jsonPanel    `json:"panels,omitempty"`
	Targets     []jsonTarget   `json:"targets,omitempty"`
	Title       string         `json:"title"`
	Type        string         `json:"type"`
}

type jsonTarget struct {
	Datasource   *Datasource `json:"datasource"`
	Expr         string      `json:"expr"`
	Format       string      `json:"format,omitempty"`
	Instant      bool        `json:"instant,omitempty"`
	LegendFormat string      `json:"legendFormat"`
	Range        bool        `json:"range,omitempty"`
	RefID        string      `json:"refId"`
}

var promDatasource = &Datasource{Type: "prometheus", UID: DatasourceVariable}

func (p panelDef) fieldConfig() map[string]any {
	steps := []any{map[string]any{"color": "green", "value": nil}}
	if p.okAt != 0 {
		steps = []any{map[string]any{"color": "red", "value": nil}, map[string]any{"color": "green", "value": p.okAt}}
	}
	if p.warn != 0 {
		steps = append(steps, map[string]any{"color": "orange", "value": p.warn})
	}
	if p.crit != 0 {
		steps = append(steps, map[string]any{"color": "red", "value": p.crit})
	}
	defaults := map[string]any{
		"color":      map[string]any{"mode": "palette-classic"},
		"thresholds": map[string]any{"mode": "absolute", "steps": steps},
		"unit":       orDefault(p.unit, "short"),
	}
	switch p.kind {
	case stat, bargauge:
		defaults["color"] = map[string]any{"mode": "thresholds"}
	case timeseries:
		defaults["min"] = 0
		defaults["custom"] = map[string]any{"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": false}
	}
	if p.max != nil {
		defaults["min"], defaults["max"] = 0, *p.max
	}
	if p.upDown {
		defaults["color"] = map[string]any{"mode": "thresholds"}
		defaults["mappings"] = []any{map[string]any{"type": "value", "options": map[string]any{
			"0": map[string]any{"text": "Down", "color": "red", "index": 0},
			"1": map[string]any{"text": "Up", "color": "green", "index": 1},
		}}}
	}
	return map[string]any{"defaults": defaults, "overrides": []any{}}
}

func (p panelDef) options() map[string]any {
	reduce := map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false}
	switch p.kind {
	case stat:
		text := "value"
		if p.showName {
			text = "name"
		}
		return map[string]any{"colorMode": "value", "graphMode": "none", "justifyMode": "auto", "orientation": "auto",
			"reduceOptions": reduce, "textMode": text}
	case bargauge:
		return map[string]any{"displayMode": "gradient", "orientation": "horizontal", "reduceOptions": reduce, "showUnfilled": true}
	case stateTimeline:
		return map[string]any{"alignValue": "left", "legend": map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": false},
			"mergeValues": true, "rowHeight": 0.9, "showValue": "never", "tooltip": map[string]any{"mode": "single", "sort": "none"}}
	case table:
		return map[string]any{"showHeader": true}
	default:
		return map[string]any{"legend": map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"}}
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// renderDashboard lays the rows out on Grafana's 24-column grid and returns the
// dashboard's JSON model.
func renderDashboard() ([]byte, error) {
	var panels []jsonPanel
	id, y := 1, 0
	for _, row := range dashboardRows {
		collapsed := false
		panels = append(panels, jsonPanel{Collapsed: &collapsed, GridPos: GridPos{H: 1, W: 24, X: 0, Y: y}, ID: id, Title: row.title, Type: "row", Panels: []jsonPanel{}})
		id++
		y++
		x, lineH := 0, 0
		for _, p := range row.panels {
			if x+p.w > 24 {
				x, y, lineH = 0, y+lineH, 0
			}
			jp := jsonPanel{
				Datasource: promDatasource, Description: p.description, FieldConfig: p.fieldConfig(),
				GridPos: GridPos{H: p.h, W: p.w, X: x, Y: y}, ID: id, Options: p.options(), Title: p.title, Type: string(p.kind),
			}
			for i, t := range p.targets {
				jt := jsonTarget{Datasource: promDatasource, Expr: t.expr, LegendFormat: orDefault(t.legend, "__auto"), RefID: string(rune('A' + i))}
				if p.kind == table {
					jt.Format, jt.Instant = "table", true
				} else {
					jt.Range = true
				}
				jp.Targets = append(jp.Targets, jt)
			}
			panels = append(panels, jp)
			id++
			x += p.w
			lineH = max(lineH, p.h)
		}
		y += lineH
	}
	variable := func(name, label, query string, all bool) map[string]any {
		v := map[string]any{
			"current": map[string]any{}, "datasource": promDatasource, "definition": query, "hide": 0,
			"includeAll": all, "label": label, "multi": all, "name": name, "options": []any{},
			"query":   map[string]any{"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
			"refresh": 2, "regex": "", "sort": 1, "type": "query",
		}
		if all {
			v["current"] = map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}}
		}
		return v
	}
	d := jsonDashboard{
		Annotations: map[string]any{"list": []any{map[string]any{
			"builtIn": 1, "datasource": map[string]any{"type": "grafana", "uid": "-- Grafana --"}, "enable": true, "hide": true,
			"iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
		}}},
		Description:  "baremetal-ccm: BGP and BFD sessions, load-balancer pools and waiting Services, BMCs, inventory, deletion guard, power-off budget and remediation storm, routes, node health. Generated by go test ./test/monitoring -update (test/monitoring/dashboard_test.go).",
		Editable:     true,
		GraphTooltip: 1,
		Links:        []any{},
		Panels:       panels,
		Refresh:      "1m",
		// Grafana 10 and later read this model; newer versions migrate it on load.
		SchemaVersion: 39,
		Tags:          []string{"baremetal-ccm", "kubernetes", "bgp"},
		Templating: map[string]any{"list": []any{
			map[string]any{"current": map[string]any{}, "hide": 0, "includeAll": false, "label": "Data source", "multi": false,
				"name": "datasource", "options": []any{}, "query": "prometheus", "refresh": 1, "regex": "", "type": "datasource"},
			variable("job", "Job", "label_values(baremetal_ccm_build_info, job)", false),
			variable("instance", "Replica", `label_values(baremetal_ccm_build_info{job=~"$job"}, instance)`, true),
		}},
		Time:     map[string]any{"from": "now-6h", "to": "now"},
		Timezone: "",
		Title:    "baremetal-ccm",
		UID:      DashboardUID,
		Version:  1,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// TestDashboardUpToDate: grafana-dashboard.json is what the definitions above make.
func TestDashboardUpToDate(t *testing.T) {
	data, err := renderDashboard()
	if err != nil {
		t.Fatal(err)
	}
	checkGenerated(t, DashboardFile, data)
}

// TestDashboardShape: the shipped JSON is a Grafana dashboard with a uid and a
// title; every panel has a unique id, fits the 24-column grid, reads the data
// source chosen in the ${datasource} variable (a Prometheus one), and has queries
// that parse as PromQL, using only variables the dashboard defines.
func TestDashboardShape(t *testing.T) {
	d, err := ParseDashboard(read(t, DashboardFile))
	if err != nil {
		t.Fatalf("%s: %v", DashboardFile, err)
	}
	if d.UID != DashboardUID || d.Title == "" || d.SchemaVersion == 0 {
		t.Errorf("uid %q, title %q, schemaVersion %d; want uid %q, a title and a schema version", d.UID, d.Title, d.SchemaVersion, DashboardUID)
	}
	vars := map[string]Variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if ds, ok := vars["datasource"]; !ok || ds.Type != "datasource" || ds.Query != "prometheus" {
		t.Errorf("no variable datasource of type datasource choosing among Prometheus data sources: %+v", ds)
	}
	for _, name := range []string{"job", "instance"} {
		if v, ok := vars[name]; !ok || v.Type != "query" {
			t.Errorf("no query variable %s: %+v", name, v)
		}
	}
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.AllPanels() {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
			t.Errorf("panel %q: gridPos %+v is off the 24-column grid", p.Title, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if p.Datasource == nil || *p.Datasource != *promDatasource {
			t.Errorf("panel %q: datasource %+v, want %+v", p.Title, p.Datasource, *promDatasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			queries++
			if tg.Datasource == nil || *tg.Datasource != *promDatasource {
				t.Errorf("panel %q, target %s: datasource %+v, want %+v", p.Title, tg.RefID, tg.Datasource, *promDatasource)
			}
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q empty or repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			for _, m := range grafanaVariable.FindAllString(tg.Expr, -1) {
				name := strings.Trim(m[1:], "{}")
				if _, ok := vars[name]; !ok && !strings.HasPrefix(name, "__") {
					t.Errorf("panel %q, target %s uses %s, which the dashboard does not define", p.Title, tg.RefID, m)
				}
			}
		}
	}
	qs, err := d.Queries(DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := queries + 2; len(qs) != want { // the panels' and the job and instance variables'
		t.Fatalf("%d queries read, want %d", len(qs), want)
	}
	if _, err := Collect(qs); err != nil {
		t.Errorf("queries that do not parse:\n%v", err)
	}
}
