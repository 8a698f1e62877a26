package promtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// NodeExporter is Debian's prometheus-node-exporter started by a test on
// 127.0.0.1 with the textfile collector only, reading Dir. It is stopped
// when the test ends.
type NodeExporter struct {
	// Addr is its address, 127.0.0.1:PORT: the scrape target, and the
	// instance label of what Prometheus scrapes from it.
	Addr string
	// Dir is its textfile collector's directory.
	Dir string
	// PID is its process.
	PID int
}

// markerFile is the file StartNodeExporter leaves in the directory: the
// series in it tells this exporter from another process that took its
// port first.
const markerFile = "promtest-exporter.prom"

// StartNodeExporter starts node_exporter reading the *.prom files of dir
// (its textfile collector, no other) on a free port, and returns once it
// serves them.
func StartNodeExporter(t testing.TB, dir string) *NodeExporter {
	t.Helper()
	if _, err := exec.LookPath("prometheus-node-exporter"); err != nil {
		why := "prometheus-node-exporter (Debian's package of that name) is not installed"
		if os.Getenv("IOSCHED_INTEGRATION") == "required" {
			t.Fatal(why + " (IOSCHED_INTEGRATION=required)")
		}
		t.Skip(why)
	}
	marker := fmt.Sprintf("promtest_exporter_dir{dir=%q} 1\n", dir)
	if err := os.WriteFile(filepath.Join(dir, markerFile), []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, pid := serveOnFreePort(t, "prometheus-node-exporter", func(addr string) []string {
		return []string{
			"--collector.disable-defaults",
			"--collector.textfile",
			"--collector.textfile.directory=" + dir,
			"--web.listen-address=" + addr,
			"--log.level=warn",
		}
	}, func(addr string) bool {
		// This exporter's, not another's on the port: it serves the
		// marker of its own directory.
		body, err := get("http://" + addr + "/metrics")
		return err == nil && strings.Contains(body, strings.TrimSpace(marker))
	})
	return &NodeExporter{Addr: addr, Dir: dir, PID: pid}
}

// get is the body of a GET of url.
func get(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

// ScrapeConfig is a Prometheus configuration (ServerOptions.Config) that
// scrapes targets (host:port, job "node") and evaluates ruleFiles, both
// every interval.
func ScrapeConfig(interval time.Duration, ruleFiles []string, targets ...string) string {
	var b strings.Builder
	iv := strconv.FormatInt(interval.Milliseconds(), 10) + "ms"
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n", iv, iv, iv)
	if len(ruleFiles) > 0 {
		b.WriteString("rule_files:\n")
		for _, f := range ruleFiles {
			fmt.Fprintf(&b, "  - %q\n", f)
		}
	}
	b.WriteString("scrape_configs:\n  - job_name: node\n    static_configs:\n      - targets:\n")
	for _, tg := range targets {
		fmt.Fprintf(&b, "          - %q\n", tg)
	}
	return b.String()
}
