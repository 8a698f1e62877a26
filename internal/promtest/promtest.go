// Package promtest reads a metrics file in the Prometheus text format as
// node_exporter's textfile collector does, for tests: parsed with the
// Prometheus libraries, so a file they would refuse fails the test. It
// also starts the real programs, Debian's, for a test's life: a Prometheus
// server (StartServer), loaded with a synthetic fleet (OpenMetrics) or
// scraping targets (ScrapeConfig), and node_exporters reading a directory
// (StartNodeExporter).
package promtest

import (
	"bytes"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse parses b, failing t when it does not parse.
func Parse(t testing.TB, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the metrics file does not parse: %v\n%s", err, b)
	}
	return fams
}

// Value finds the sample of family name whose labels include want (a
// histogram's sample count for a histogram, fractional when written so);
// ok false when there is none.
func Value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		case m.Histogram != nil && m.Histogram.SampleCountFloat != nil:
			return m.Histogram.GetSampleCountFloat(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}
