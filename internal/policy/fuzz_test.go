package policy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/iosched/iosched/internal/sysfs"
)

// FuzzParse: no input makes Parse (or the position scanner) panic or hang,
// an invalid policy always says why, and a valid one evaluates.
func FuzzParse(f *testing.F) {
	f.Add(Embedded())
	contrib, _ := filepath.Glob("../../contrib/policies/*.toml")
	for _, c := range contrib {
		if b, err := os.ReadFile(c); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		"",
		"[[rule]]\nname = \"x\"\n[rule.match\n",
		"[rule]\nname = 1\n",
		"[[rule]]\nname = \"a\"\n[[rule]]\nname = \"a\"\n",
		"[[rule]]\nname = \"x\"\n[rule.match]\nclass = [\"virtioo\", 1]\nname = \"[\"\nmodel = \"(\"\nsize = { min = \"1GB\", max = -1 }\nhw_queues = { min = 3, max = 1 }\n",
		"[[rule]]\nname = \"x\"\n[rule.set]\nscheduler = [\"deadline\", \"\"]\nnr_requests = 1\n[rule.set.iosched]\n\"../x\" = 1\n",
		"[[rule]]\nname = \"x\"\nset = { scheduler = \"none\", iosched = { a = [1, {b = 2}] } }\n[[rule.except]]\n[[rule.except]]\nclass = \"loop\"\n",
		"[daemon]\nreconcile_interval = \"1ns\"\nuevent_source = [\"udev\"]\n",
		"a = \"\"\"\n[[rule]]\n\"\"\"\nb = '''x'''''\n",
		"\"\\u00e9\" = { \"k.k\" = 'v', x.y.z = 1 }\n",
	} {
		f.Add([]byte(s))
	}
	devs := []*sysfs.Device{
		vda(),
		{Name: "sda", Class: sysfs.ClassSCSI, Transport: "ahci", Rotational: ptr(true), HWQueues: ptr(1), Model: "X", Properties: map[string]string{"ID_BUS": "ata"}},
		{Name: "zram0", Class: sysfs.ClassZRAM},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		positions(data)
		p, err := Parse(File{Name: "f.toml", Data: data})
		if err != nil {
			var es *Errors
			if !errors.As(err, &es) || len(*es) == 0 {
				t.Fatalf("invalid policy without *Errors: %T %v", err, err)
			}
			for _, e := range *es {
				if e.Msg == "" || e.File != "f.toml" {
					t.Fatalf("error without message or file: %+v", e)
				}
			}
			return
		}
		for _, d := range devs {
			ev := p.Evaluate(d)
			if len(ev.Rules) != len(p.Rules) {
				t.Fatalf("%d results for %d rules", len(ev.Rules), len(p.Rules))
			}
			for _, s := range ev.Settings {
				if len(s.Values) == 0 || s.Rule == "" {
					t.Fatalf("setting without value or rule: %+v", s)
				}
			}
		}
	})
}
