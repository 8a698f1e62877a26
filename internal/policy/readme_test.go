package policy

import (
	"os"
	"regexp"
	"testing"
)

// The policies the top README shows parse, so its quick start cannot rot.
func TestReadmePoliciesParse(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("README.md shows no ```toml policy")
	}
	for i, b := range blocks {
		p, err := Parse(File{Name: "README.md", Data: b[1]})
		if err != nil {
			t.Errorf("README.md policy %d: %v\n%s", i+1, err, b[1])
			continue
		}
		if len(p.Rules) == 0 {
			t.Errorf("README.md policy %d has no rule", i+1)
		}
	}
}
