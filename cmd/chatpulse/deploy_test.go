package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The files under deploy/ that an operator loads into Prometheus and
// Grafana, relative to this package.
const (
	rulesFile     = "../../deploy/prometheus/chatpulse-rules.yml"
	rulesTestFile = "../../deploy/prometheus/chatpulse-rules.test.yml"
	dashboardFile = "../../deploy/grafana/chatpulse.json"
)

// groupOnly are the metrics that only group mode (docs/contract.md section 8)
// exports, so a standalone instance cannot show them: the first three are
// the contract's, chatpulse_group_complete (1 while every partition has a
// caught-up owner) is what ChatpulseGroupIncomplete reads. docs/operating.md's
// metrics table lists each as group mode only.
var groupOnly = []string{
	"chatpulse_group_members",
	"chatpulse_group_partitions_owned",
	"chatpulse_group_lag_messages",
	"chatpulse_group_complete",
	"chatpulse_group_partition_starts_total",
	"chatpulse_group_unconsume_failed_total",
}

// actOnly are the metrics only an instance with --act exports
// (docs/contract.md section 14); docs/operating.md's metrics table says
// so of each.
var actOnly = []string{
	"chatpulse_acts_total",
	"chatpulse_act_queue",
	"chatpulse_act_rate_limited_total",
	"chatpulse_act_rooms_without_power",
}

// prometheusOwn are series Prometheus makes itself while scraping.
var prometheusOwn = []string{"up"}

// The alert rules load in Prometheus's own checker, and fire (and stay
// quiet) where their unit tests say.
func TestAlertRules(t *testing.T) {
	promtool := promtoolPath(t)
	for _, args := range [][]string{
		{"check", "rules", filepath.Base(rulesFile)},
		{"test", "rules", filepath.Base(rulesTestFile)},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Dir(rulesFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// promtoolPath finds promtool, or skips the test without it; CI=true makes
// a missing promtool a failure, since CI installs it.
func promtoolPath(t *testing.T) string {
	t.Helper()
	return toolPath(t, "prometheus", "the alert rules test", "promtool")
}

// toolPath finds the first of names on the PATH, or skips the test that
// needs it (for what) without it; with CI=true, which installs the Debian
// package pkg, a missing tool is a failure.
func toolPath(t *testing.T, pkg, what string, names ...string) string {
	t.Helper()
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("%s is not installed (apt-get install -y %s): %s needs it", names[0], pkg, what)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI=true, so this is a failure")
	}
	t.Skip(msg + "; skipping")
	return ""
}

// chatpulse_ready says what /readyz says, for the alert rules: 0 until the
// consumer has caught up, 1 after.
func TestReadyMetric(t *testing.T) {
	early := &testMain{t: t, url: startNotConsuming(t)}
	if status := early.get("/readyz", nil); status != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before consuming: %d", status)
	}
	if got := early.metric("chatpulse_ready"); got != 0 {
		t.Fatalf("chatpulse_ready before consuming = %v, want 0", got)
	}
	if got := startMain(t).metric("chatpulse_ready"); got != 1 {
		t.Fatalf("chatpulse_ready once ready = %v, want 1", got)
	}
}

// startNotConsuming serves the HTTP API of a chatpulse that is built and
// attached to NATS but not yet consuming, as one is until its replay has
// caught up, and returns its base URL.
func startNotConsuming(t *testing.T) string {
	t.Helper()
	m := NewMain()
	m.Log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	args := []string{"--http", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", t.TempDir()}
	if err := m.ParseFlags(args, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if err := m.build(); err != nil {
		t.Fatal(err)
	}
	ln, err := m.attach(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(m.web)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() { srv.Close(); m.Close() })
	return srv.URL
}

// Every metric the dashboard and the alert rules read is one a running
// chatpulse exports (or one only group mode exports), and every chatpulse
// metric it exports is on the dashboard.
func TestDeployMetricNames(t *testing.T) {
	tm := startMain(t)
	exported := scrapeNames(t, tm.url+"/metrics")
	if !exported["chatpulse_ready"] || !exported["chatpulse_events_received_total"] {
		t.Fatalf("/metrics lacks chatpulse_ready or chatpulse_events_received_total: %v", exported)
	}

	onDashboard := map[string]bool{}
	for _, expr := range dashboardQueries(t) {
		for _, name := range promqlNames(expr) {
			onDashboard[name] = true
		}
	}
	inRules := map[string]bool{}
	for _, expr := range ruleExprs(t) {
		for _, name := range promqlNames(expr) {
			inRules[name] = true
		}
	}
	for where, names := range map[string]map[string]bool{dashboardFile: onDashboard, rulesFile: inRules} {
		if len(names) < 5 {
			t.Fatalf("%s: found only %v", where, names)
		}
		for name := range names {
			if !exported[name] && !slices.Contains(groupOnly, name) && !slices.Contains(actOnly, name) && !slices.Contains(prometheusOwn, name) {
				t.Errorf("%s reads %s, which chatpulse does not export", where, name)
			}
		}
	}

	metricsDoc, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range groupOnly {
		if exported[name] {
			t.Errorf("%s is exported by a standalone instance: take it off groupOnly", name)
		}
		if !onDashboard[name] {
			t.Errorf("no dashboard panel shows %s", name)
		}
		if !docSays(string(metricsDoc), name, "group mode") {
			t.Errorf("docs/operating.md's metrics table does not list %s as group mode only", name)
		}
	}
	for _, name := range actOnly {
		if exported[name] {
			t.Errorf("%s is exported by an instance without --act: take it off actOnly", name)
		}
		if !onDashboard[name] {
			t.Errorf("no dashboard panel shows %s", name)
		}
		if !docSays(string(metricsDoc), name, "with `--act` only") {
			t.Errorf("docs/operating.md's metrics table does not list %s as with --act only", name)
		}
	}
	if !inRules["chatpulse_group_complete"] || !inRules["chatpulse_ready"] {
		t.Error("the rules do not alert on chatpulse_group_complete and chatpulse_ready")
	}
	for name := range exported {
		if strings.HasPrefix(name, "chatpulse_") && !onDashboard[name] {
			t.Errorf("%s is exported and no panel of %s shows it", name, dashboardFile)
		}
	}
}

// docSays reports whether a line of a document names the metric and says
// what.
func docSays(doc, name, what string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if (strings.Contains(line, "`"+name+"`") || strings.Contains(line, "`"+name+"{")) && strings.Contains(line, what) {
			return true
		}
	}
	return false
}

// scrapeNames reads the metric names of a Prometheus text exposition.
func scrapeNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		// # TYPE name counter|gauge|histogram|summary|untyped
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			if f[3] == "histogram" || f[3] == "summary" {
				names[f[2]+"_sum"], names[f[2]+"_count"] = true, true
				names[f[2]+"_bucket"] = f[3] == "histogram"
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// dashboardQueries reads the PromQL of every panel target and template
// variable of the Grafana dashboard, checking its shape on the way: panel
// ids unique, every query panel on the datasource variable, within 24
// columns, with at least one query.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name, Type string
				Query      any // a string, or {"query": ...}
			}
		}
		Panels []struct {
			ID          int
			Type, Title string
			Datasource  struct{ UID string }
			GridPos     struct{ X, W int }
			Targets     []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	hasDatasource := false
	for _, v := range d.Templating.List {
		switch q := v.Query.(type) {
		case map[string]any:
			// label_values(SELECTOR, label): the selector is PromQL.
			s, _ := q["query"].(string)
			sel, ok := strings.CutPrefix(s, "label_values(")
			if i := strings.LastIndex(sel, ","); ok && i > 0 {
				exprs = append(exprs, sel[:i])
			} else {
				t.Errorf("%s: variable %s: query %q is not label_values(selector, label)", dashboardFile, v.Name, s)
			}
		case string:
			hasDatasource = hasDatasource || v.Type == "datasource" && v.Name == "datasource" && q == "prometheus"
		}
	}
	if !hasDatasource {
		t.Errorf("%s: no datasource variable for Prometheus", dashboardFile)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if p.ID == 0 || ids[p.ID] {
			t.Errorf("%s: panel %q: id %d missing or repeated", dashboardFile, p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W < 1 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("%s: panel %q is outside the 24 columns", dashboardFile, p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("%s: panel %q: datasource %q, %d queries", dashboardFile, p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs
}

// ruleExprs reads the expression of every alert rule.
func ruleExprs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var exprs []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	return exprs
}
