package policy

import (
	"errors"
	"reflect"
	"testing"
)

func TestDaemonMetricsFile(t *testing.T) {
	t.Parallel()
	p, err := Parse(File{Name: "p.toml", Data: []byte("[daemon]\nmetrics_file = \"/var/lib/prometheus/node-exporter/iosched.prom\"\n")})
	if err != nil {
		t.Fatal(err)
	}
	if p.Daemon.MetricsFile != "/var/lib/prometheus/node-exporter/iosched.prom" {
		t.Errorf("MetricsFile = %q", p.Daemon.MetricsFile)
	}
	// Off unless set; a later file's value overrides, "" turns it off again.
	if p, err := Parse(File{Name: "p.toml", Data: []byte("")}); err != nil || p.Daemon.MetricsFile != "" {
		t.Errorf("default: %q, %v", p.Daemon.MetricsFile, err)
	}
	p, err = Parse(
		File{Name: "a.toml", Data: []byte("[daemon]\nmetrics_file = \"/run/a.prom\"\n")},
		File{Name: "b.toml", Data: []byte("[daemon]\nmetrics_file = \"\"\n")},
	)
	if err != nil || p.Daemon.MetricsFile != "" {
		t.Errorf("a later file's \"\": %q, %v", p.Daemon.MetricsFile, err)
	}
}

func TestDaemonMetricsFileErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ value, want string }{
		{`"iosched.prom"`, `p.toml:2:1: daemon.metrics_file: "iosched.prom" is not an absolute path: the daemon's working directory is /`},
		{`"/var/lib/node-exporter/iosched.txt"`, `p.toml:2:1: daemon.metrics_file: "/var/lib/node-exporter/iosched.txt" does not end in .prom: node_exporter's textfile collector reads only *.prom files`},
		{`"/var/lib//node-exporter/../iosched.prom"`, `p.toml:2:1: daemon.metrics_file: "/var/lib//node-exporter/../iosched.prom" is not a clean path: write "/var/lib/iosched.prom"`},
		{`"/run/a\u0000.prom"`, `p.toml:2:1: daemon.metrics_file: "/run/a\x00.prom" contains a NUL byte`},
		{`true`, `p.toml:2:1: daemon.metrics_file: want a string, not a boolean`},
	} {
		data := []byte("[daemon]\nmetrics_file = " + tc.value + "\n")
		_, err := Parse(File{Name: "p.toml", Data: data})
		var errs *Errors
		if !errors.As(err, &errs) {
			t.Errorf("%s: err %v, want position errors", tc.value, err)
			continue
		}
		var got []string
		for _, e := range *errs {
			got = append(got, e.Error())
		}
		if !reflect.DeepEqual(got, []string{tc.want}) {
			t.Errorf("%s:\n got %q\nwant %q", tc.value, got, tc.want)
		}
	}
	// A misspelling is suggested the key.
	_, err := Parse(File{Name: "p.toml", Data: []byte("[daemon]\nmetric_file = \"/run/a.prom\"\n")})
	if err == nil || err.Error() == "" {
		t.Fatal("a misspelt key is accepted")
	}
	var errs *Errors
	if errors.As(err, &errs) && (*errs)[0].Error() != `p.toml:2:1: daemon.metric_file: unknown key; did you mean "metrics_file"?` {
		t.Errorf("misspelt key: %v", (*errs)[0])
	}
}
