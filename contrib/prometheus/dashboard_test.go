// Package prometheus holds the Prometheus rules, alert and Grafana
// dashboard for iosched's metrics; its test runs every query of the
// dashboard against a real Prometheus that evaluates the rules.
package prometheus

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/promtest"
)

// dashboard is what the test reads of grafana.json.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasource     `json:"datasource"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

type panel struct {
	ID         int         `json:"id"`
	Title      string      `json:"title"`
	Type       string      `json:"type"`
	Datasource *datasource `json:"datasource"`
	Targets    []target    `json:"targets"`
	Panels     []panel     `json:"panels"` // a row's
}

type target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	Instant      bool        `json:"instant"`
	Range        bool        `json:"range"`
	LegendFormat string      `json:"legendFormat"`
	Datasource   *datasource `json:"datasource"`
}

// query is the PromQL of a variable of type query: a string, or (Grafana
// 10 and later) an object with a query field.
func (v variable) query() (string, error) {
	var s string
	if err := json.Unmarshal(v.Query, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &o); err != nil {
		return "", fmt.Errorf("variable %s: query is neither a string nor an object with a query: %s", v.Name, v.Query)
	}
	return o.Query, nil
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana.json: %v", err)
	}
	return d
}

// allPanels are the dashboard's panels, rows' panels included.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// The test fleet: two keys over three machines. m1's vda is busy at depth
// 1 and its probe chose mq-deadline, 20% behind none there: the one disk
// the alert's expression and the "behind" panel show.
const (
	keyA = "virtio/virtio_blk/model-a/hwq1/qd256/10737418240B/6.18.0"
	keyB = "nvme/nvme/model-b/hwq2/qd1023/1073741824B/6.18.0"
)

func testFleet() ([]promtest.Machine, []promtest.Probe) {
	curves := func(none, mq float64) map[string]map[int]float64 {
		return map[string]map[int]float64{
			"none":        {1: none, 8: 4 * none, 32: 6 * none},
			"mq-deadline": {1: mq, 8: 4 * mq, 32: 5 * mq},
		}
	}
	fleet := []promtest.Machine{
		{Instance: "m1:9100", Disks: []promtest.Disk{
			{Name: "vda", Key: keyA, Busy: map[int]float64{0: 0.6}, Curves: curves(12000, 10000), Source: "probed"},
			{Name: "nvme0n1", Key: keyB, Busy: map[int]float64{3: 0.4}, Curves: curves(90000, 80000), Source: "probed"},
		}},
		{Instance: "m2:9100", Disks: []promtest.Disk{
			{Name: "vda", Key: keyA, Busy: map[int]float64{0: 0.2, 3: 0.2}, Curves: curves(11000, 10500), Source: "remembered"},
			{Name: "nvme0n1", Key: keyB, Busy: map[int]float64{5: 0.5}, Curves: curves(85000, 86000), Source: "probed"},
		}},
		{Instance: "m3:9100", Disks: []promtest.Disk{
			{Name: "vda", Key: keyA, Busy: map[int]float64{1: 0.1}},
		}},
	}
	probes := []promtest.Probe{
		{Instance: "m1:9100", Disk: "vda", QD1: map[string]float64{"none": 12000, "mq-deadline": 10000}, Chosen: "mq-deadline"},
		{Instance: "m1:9100", Disk: "nvme0n1", QD1: map[string]float64{"none": 90000, "mq-deadline": 80000}, Chosen: "none"},
		{Instance: "m2:9100", Disk: "vda", QD1: map[string]float64{"none": 11000, "mq-deadline": 10500}, Chosen: "none"},
		{Instance: "m2:9100", Disk: "nvme0n1", QD1: map[string]float64{"none": 85000, "mq-deadline": 86000}, Chosen: "mq-deadline"},
	}
	return fleet, probes
}

// want is what each target of the dashboard answers for the test fleet:
// the labels every series has and how many series there are with every
// key selected. A target missing here, or an entry naming no target,
// fails the test.
var want = map[string]struct {
	labels []string
	series int
}{
	"Busy time by depth, per key/A":                                 {[]string{"key", "le"}, 2 * (len(promtest.BusyBounds) + 1)},
	"Disks per key/A":                                               {[]string{"key"}, 2},
	"Candidates' median curves, per key/A":                          {[]string{"key", "scheduler", "depth"}, 2 * 2 * 3},
	"Candidates' median curves, per key/B":                          {[]string{"key", "scheduler", "depth"}, 2 * 2 * 3},
	"Disks behind the best candidate at depth 1 by more than 10%/A": {[]string{"key"}, 1},
	"Disks the alert's expression selects/A":                        {[]string{"key", "instance", "disk"}, 1},
	"Busy disk-hours over the range, per key/A":                     {[]string{"key"}, 2},
	"Busy disks, per key/A":                                         {[]string{"key"}, 2},
}

// grafanaRegexEscape escapes a variable's value as Grafana's Prometheus
// data source does for a regex matcher.
func grafanaRegexEscape(s string) string {
	return regexp.MustCompile(`[$^*+?.()|{}\[\]']`).ReplaceAllString(s, `\\$0`)
}

// substitute replaces the dashboard's variables in expr as Grafana does
// for a dashboard range of rangeDur and a scrape interval of a minute;
// an unknown variable is an error.
func substitute(expr, key string, rangeDur time.Duration) (string, error) {
	values := map[string]string{
		"key":             key,
		"__range":         model.Duration(rangeDur).String(),
		"__rate_interval": "4m",
		"__interval":      "1m",
	}
	var unknown []string
	out := regexp.MustCompile(`\$(\w+)|\$\{(\w+)\}`).ReplaceAllStringFunc(expr, func(v string) string {
		name := strings.Trim(v, "${}")
		if s, ok := values[name]; ok {
			return s
		}
		unknown = append(unknown, v)
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown variables %v", unknown)
	}
	return out, nil
}

// rulesFile is iosched.rules.yml as Prometheus reads it.
type rulesFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ([]byte, rulesFile) {
	t.Helper()
	b, err := os.ReadFile("iosched.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf rulesFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("iosched.rules.yml: %v", err)
	}
	return b, rf
}

// startServer starts a Prometheus over the test fleet, with data up to a
// second ago, that evaluates iosched.rules.yml every second (its groups'
// interval rewritten: the recorded series exist from the server's start
// on), and waits until every recorded series has a sample.
func startServer(t *testing.T) *promtest.Server {
	t.Helper()
	raw, rf := readRules(t)
	n := strings.Count(string(raw), "\n    interval: ")
	if n != len(rf.Groups) {
		t.Fatalf("iosched.rules.yml: %d group intervals found to rewrite, want one a group (%d)", n, len(rf.Groups))
	}
	fast := regexp.MustCompile(`(?m)^    interval: .*$`).ReplaceAllString(string(raw), "    interval: 1s")
	rules := filepath.Join(t.TempDir(), "iosched.rules.yml")
	if err := os.WriteFile(rules, []byte(fast), 0o644); err != nil {
		t.Fatal(err)
	}
	fleet, probes := testFleet()
	end := time.Now().Add(-time.Second)
	om := promtest.JoinOpenMetrics(
		promtest.OpenMetrics(fleet, end, 2*time.Hour, time.Minute),
		promtest.ProbeOpenMetrics(probes, end, 2*time.Hour, time.Minute))
	srv := promtest.StartServer(t, promtest.ServerOptions{
		OpenMetrics: om,
		Config:      fmt.Sprintf("global:\n  evaluation_interval: 1s\nrule_files:\n  - %s\n", rules),
	})
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record == "" {
				continue
			}
			eventually.True(t, 30*time.Second, "a sample of "+r.Record, func() bool {
				v, _, _, err := srv.API.Query(context.Background(), r.Record, time.Now())
				vec, ok := v.(model.Vector)
				return err == nil && ok && len(vec) > 0
			})
		}
	}
	return srv
}

// run executes a target's expression as the panel would (an instant
// query at at, or a range query over the hour before at, a minute a
// step) and checks its answer: no error or warning, at least one series,
// every series with the labels wanted and, when key is one key, of that
// key.
func run(ctx context.Context, api v1.API, expr string, instant bool, at time.Time, labels []string, key string) (int, error) {
	var (
		v        model.Value
		warnings v1.Warnings
		infos    v1.Infos
		err      error
	)
	if instant {
		v, warnings, infos, err = api.Query(ctx, expr, at)
	} else {
		v, warnings, infos, err = api.QueryRange(ctx, expr, v1.Range{Start: at.Add(-time.Hour), End: at, Step: time.Minute})
	}
	if err != nil {
		return 0, err
	}
	if len(warnings) > 0 || len(infos) > 0 {
		return 0, fmt.Errorf("warnings %v, infos %v", warnings, infos)
	}
	var metrics []model.Metric
	switch v := v.(type) {
	case model.Vector:
		for _, s := range v {
			metrics = append(metrics, s.Metric)
		}
	case model.Matrix:
		for _, s := range v {
			metrics = append(metrics, s.Metric)
		}
	default:
		return 0, fmt.Errorf("answered a %s, not a vector or a matrix", v.Type())
	}
	if len(metrics) == 0 {
		return 0, fmt.Errorf("no series")
	}
	for _, m := range metrics {
		for _, l := range labels {
			if _, ok := m[model.LabelName(l)]; !ok {
				return 0, fmt.Errorf("series %s has no label %s", m, l)
			}
		}
		if key != "" && string(m["key"]) != key {
			return 0, fmt.Errorf("series %s: key is not %s", m, key)
		}
	}
	return len(metrics), nil
}

func TestDashboardQueries(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("the dashboard has no title or uid: %q %q", d.Title, d.UID)
	}
	srv := startServer(t)
	ctx := context.Background()
	at := time.Now()

	// The variables: a data source one, and key from label_values.
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v := vars["datasource"]; v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		t.Errorf("variable datasource: type %q query %s, want a prometheus data source variable", v.Type, v.Query)
	}
	kv := vars["key"]
	if kv.Type != "query" || kv.Datasource == nil || kv.Datasource.UID != "${datasource}" || !kv.IncludeAll || kv.AllValue != ".*" {
		t.Errorf("variable key: %+v, want a query of ${datasource} including All as .*", kv)
	}
	q, err := kv.query()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`).FindStringSubmatch(q)
	if m == nil {
		t.Fatalf("variable key: query %q, want label_values(SERIES, LABEL)", q)
	}
	values, warnings, infos, err := srv.API.LabelValues(ctx, m[2], []string{m[1]}, at.Add(-24*time.Hour), at)
	if err != nil || len(warnings) > 0 || len(infos) > 0 {
		t.Fatalf("variable key: %s: %v, warnings %v, infos %v", q, err, warnings, infos)
	}
	if got := fmt.Sprint(values); got != fmt.Sprint([]string{keyB, keyA}) {
		t.Errorf("variable key: %s gives %s, want the fleet's keys", q, got)
	}

	// Every target of every panel, with every key and with one.
	ran := map[string]bool{}
	for _, p := range allPanels(d.Panels) {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %+v, want ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			name := p.Title + "/" + tg.RefID
			ran[name] = true
			w, ok := want[name]
			if !ok {
				t.Errorf("%s: not in the test's table of what each target answers", name)
				continue
			}
			if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
				t.Errorf("%s: data source %+v, want ${datasource}", name, tg.Datasource)
			}
			if tg.Instant == tg.Range {
				t.Errorf("%s: instant %v and range %v: want one of them", name, tg.Instant, tg.Range)
			}
			for _, l := range regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`).FindAllStringSubmatch(tg.LegendFormat, -1) {
				if !slices.Contains(w.labels, l[1]) {
					t.Errorf("%s: the legend uses %s, which the test does not check", name, l[1])
				}
			}
			for _, key := range []string{"", keyA} {
				value := kv.AllValue
				if key != "" {
					value = grafanaRegexEscape(key)
				}
				expr, err := substitute(tg.Expr, value, 24*time.Hour)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				n, err := run(ctx, srv.API, expr, tg.Instant, at, w.labels, key)
				if err != nil {
					t.Errorf("%s (key %q): %v\nquery: %s", name, value, err, expr)
					continue
				}
				if key == "" && n != w.series {
					t.Errorf("%s: %d series, want %d\nquery: %s", name, n, w.series, expr)
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if !ran[name] {
			t.Errorf("%s: the test expects this target, the dashboard has none", name)
		}
	}

	// The checks above fail on a broken query: a misspelled recorded
	// series answers nothing, a syntax error is refused, a label
	// aggregated away is missing, a series of another key is refused.
	for _, c := range []struct {
		expr   string
		labels []string
		key    string
	}{
		{`iosched_key:busy_depth_share:ratio1d{key=~".*"}`, []string{"key", "le"}, ""},
		{`count by (key) (iosched_disk_info{key=~".*"}`, []string{"key"}, ""},
		{`count(iosched_disk_info{key=~".*"})`, []string{"key"}, ""},
		{`count by (key) (iosched_disk_info)`, []string{"key"}, keyA},
	} {
		for _, instant := range []bool{true, false} {
			if _, err := run(ctx, srv.API, c.expr, instant, at, c.labels, c.key); err == nil {
				t.Errorf("%s (instant %v): no error", c.expr, instant)
			}
		}
	}
	if _, err := substitute(`rate(x[$__unknown])`, ".*", time.Hour); err == nil {
		t.Error("an unknown variable: no error")
	}
}

// The panel of the alert's expression runs the alert's own expression.
func TestDashboardAlertPanelFollowsTheRule(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	_, rf := readRules(t)
	var alert string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "IoschedSchedulerLosesAtWorkloadDepth" {
				alert = r.Expr
			}
		}
	}
	if alert == "" {
		t.Fatal("iosched.rules.yml has no alert IoschedSchedulerLosesAtWorkloadDepth")
	}
	space := regexp.MustCompile(`\s+`)
	norm := func(s string) string { return strings.TrimSpace(space.ReplaceAllString(s, " ")) }
	for _, p := range allPanels(d.Panels) {
		if p.Title == "Disks the alert's expression selects" {
			if len(p.Targets) != 1 || !strings.Contains(norm(p.Targets[0].Expr), norm(alert)) {
				t.Errorf("panel %q does not contain the alert's expression %q", p.Title, norm(alert))
			}
			return
		}
	}
	t.Error("no panel of the alert's expression")
}
