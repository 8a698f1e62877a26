// Package deploy holds deployment examples; its test keeps the policies
// they carry valid.
package deploy

import (
	"os"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/policy"
)

// cloudInitPolicy returns the content of the write_files entry for path in
// a cloud-config: the block scalar after "content: |", dedented.
func cloudInitPolicy(t *testing.T, doc, path string) string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	i := 0
	for i < len(lines) && strings.TrimSpace(lines[i]) != "- path: "+path {
		i++
	}
	for i < len(lines) && strings.TrimSpace(lines[i]) != "content: |" {
		i++
	}
	if i == len(lines) {
		t.Fatalf("no write_files entry with a content block for %s", path)
	}
	indent := ""
	var out []string
	for _, l := range lines[i+1:] {
		if strings.TrimSpace(l) == "" {
			out = append(out, "")
			continue
		}
		if indent == "" {
			indent = l[:len(l)-len(strings.TrimLeft(l, " "))]
		}
		if !strings.HasPrefix(l, indent) {
			break
		}
		out = append(out, strings.TrimPrefix(l, indent))
	}
	return strings.Join(out, "\n")
}

func TestCloudInitPolicyParses(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("cloud-init.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(doc), "#cloud-config\n") {
		t.Error("cloud-init.yaml does not start with #cloud-config: cloud-init would ignore it")
	}
	text := cloudInitPolicy(t, string(doc), paths.Default.PolicyFile)
	p, err := policy.Parse(policy.File{Name: "cloud-init.yaml:" + paths.Default.PolicyFile, Data: []byte(text)})
	if err != nil {
		t.Fatalf("the policy in cloud-init.yaml is invalid:\n%v", err)
	}
	if len(p.Rules) < 3 {
		t.Errorf("read %d rules from cloud-init.yaml, want the 3 it has: is the block cut short?", len(p.Rules))
	}
}
