package promtest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
)

// Server is a Prometheus server a test started: Debian's prometheus, on
// 127.0.0.1, with a storage directory of its own. It is stopped when the
// test ends.
type Server struct {
	// URL is its address, http://127.0.0.1:PORT.
	URL string
	// API is a client of its HTTP API.
	API v1.API
	// Dir is its storage directory.
	Dir string
	// PID is its process.
	PID int
}

// ServerOptions say what the server starts with.
type ServerOptions struct {
	// OpenMetrics, when not empty, is a file in the OpenMetrics text
	// format (ending "# EOF") turned into the server's TSDB blocks by
	// `promtool tsdb create-blocks-from openmetrics` before it starts.
	OpenMetrics []byte
	// Config is its configuration file (YAML); "" for one that scrapes
	// nothing.
	Config string
}

// tools says whether prometheus and promtool can run here, failing t
// when IOSCHED_INTEGRATION=required and one is missing, else skipping it.
func tools(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"prometheus", "promtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			why := tool + " (Debian's prometheus package) is not installed"
			if os.Getenv("IOSCHED_INTEGRATION") == "required" {
				t.Fatal(why + " (IOSCHED_INTEGRATION=required)")
			}
			t.Skip(why)
		}
	}
}

// StartServer creates the server's blocks from o.OpenMetrics and starts
// it, returning once it answers queries.
func StartServer(t testing.TB, o ServerOptions) *Server {
	t.Helper()
	tools(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if len(o.OpenMetrics) > 0 {
		in := filepath.Join(dir, "input.om")
		if err := os.WriteFile(in, o.OpenMetrics, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", in, data).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool tsdb create-blocks-from openmetrics: %v\n%s", err, lastBytes(out, 4096))
		}
		if err := os.Remove(in); err != nil {
			t.Fatal(err)
		}
	}
	cfg := o.Config
	if cfg == "" {
		cfg = "global: {}\n"
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var client v1.API
	addr, pid := serveOnFreePort(t, "prometheus", func(addr string) []string {
		return []string{
			"--config.file=" + cfgPath,
			"--storage.tsdb.path=" + data,
			// Blocks of any age stay: the test's series may be dated
			// anywhere.
			"--storage.tsdb.retention.time=100y",
			"--web.listen-address=" + addr,
			"--log.level=warn",
		}
	}, func(addr string) bool {
		c, err := api.NewClient(api.Config{Address: "http://" + addr})
		if err != nil {
			return false
		}
		client = v1.NewAPI(c)
		// The server answering must be this one, not another that
		// took the port first (this one then exits): its storage says
		// so.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		flags, err := client.Flags(ctx)
		if err == nil {
			_, _, _, err = client.Query(ctx, "1", time.Time{})
		}
		return err == nil && flags["storage.tsdb.path"] == data
	})
	return &Server{URL: "http://" + addr, API: client, Dir: data, PID: pid}
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Port is the server's port.
func (s *Server) Port() int {
	_, p, _ := net.SplitHostPort(s.URL[len("http://"):])
	n, _ := strconv.Atoi(p)
	return n
}
