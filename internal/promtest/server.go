package promtest

import (
	"bytes"
	"context"
	"fmt"
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
	// A free port is found by binding port 0 and closing it; another
	// process can take it before prometheus binds it, which shows as
	// prometheus exiting at once: then another port is tried.
	var lastErr error
	for range 5 {
		s, err := start(t, cfgPath, data)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("prometheus did not start: %v", lastErr)
	return nil
}

// start runs prometheus on a free port and waits until it answers.
func start(t testing.TB, cfgPath, data string) (*Server, error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	var log bytes.Buffer
	cmd := exec.Command("prometheus",
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+data,
		// Blocks of any age stay: the test's series may be dated
		// anywhere.
		"--storage.tsdb.retention.time=100y",
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = &log, &log
	c, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	url := "http://" + addr
	client, err := api.NewClient(api.Config{Address: url})
	if err != nil {
		c.stop()
		return nil, err
	}
	s := &Server{URL: url, API: v1.NewAPI(client), Dir: data, PID: cmd.Process.Pid}
	// Starting takes as long as loading the blocks and replaying the
	// write-ahead log: no deadline but the test's own, and prometheus
	// exiting.
	for {
		select {
		case <-c.exited:
			c.stop()
			return nil, fmt.Errorf("prometheus on %s exited: %v\n%s", addr, c.err, lastBytes(log.Bytes(), 4096))
		default:
		}
		// The server answering must be this one, not another that took
		// the port first (this one then exits): its storage says so.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		flags, err := s.API.Flags(ctx)
		if err == nil {
			_, _, _, err = s.API.Query(ctx, "1", time.Time{})
		}
		cancel()
		if err == nil && flags["storage.tsdb.path"] == data {
			t.Cleanup(c.stop)
			return s, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
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
