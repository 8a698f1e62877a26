// Package kubernetes holds the manifests that run iosched as a DaemonSet;
// its tests hold them to the least privilege they claim, keep the policy
// in the ConfigMap valid, and run the daemon as the pod would.
package kubernetes

import (
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/policy"
)

// The manifests are decoded strictly into these types: a field they do not
// name (hostPID, privileged: true under another key, a new volume type)
// fails the test, so nothing is granted without a check being written.

type meta struct {
	Name      string            `yaml:"name"`
	Namespace string            `yaml:"namespace"`
	Labels    map[string]string `yaml:"labels"`
}

type header struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
}

type namespace struct {
	header   `yaml:",inline"`
	Metadata meta `yaml:"metadata"`
}

type serviceAccount struct {
	header                       `yaml:",inline"`
	Metadata                     meta  `yaml:"metadata"`
	AutomountServiceAccountToken *bool `yaml:"automountServiceAccountToken"`
}

type configMap struct {
	header   `yaml:",inline"`
	Metadata meta              `yaml:"metadata"`
	Data     map[string]string `yaml:"data"`
}

type kustomization struct {
	header    `yaml:",inline"`
	Resources []string `yaml:"resources"`
}

type daemonSet struct {
	header   `yaml:",inline"`
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		UpdateStrategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxUnavailable string `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"updateStrategy"`
		Template struct {
			Metadata meta    `yaml:"metadata"`
			Spec     podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	ServiceAccountName            string            `yaml:"serviceAccountName"`
	AutomountServiceAccountToken  *bool             `yaml:"automountServiceAccountToken"`
	EnableServiceLinks            *bool             `yaml:"enableServiceLinks"`
	NodeSelector                  map[string]string `yaml:"nodeSelector"`
	Tolerations                   []map[string]string
	PriorityClassName             string `yaml:"priorityClassName"`
	TerminationGracePeriodSeconds int    `yaml:"terminationGracePeriodSeconds"`
	HostNetwork                   bool   `yaml:"hostNetwork"`
	HostPID                       bool   `yaml:"hostPID"`
	HostIPC                       bool   `yaml:"hostIPC"`
	HostUsers                     *bool  `yaml:"hostUsers"`
	Containers                    []container
	Volumes                       []volume
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Env   []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		RunAsUser                *int  `yaml:"runAsUser"`
		RunAsGroup               *int  `yaml:"runAsGroup"`
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		Privileged               *bool `yaml:"privileged"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
			Add  []string `yaml:"add"`
		} `yaml:"capabilities"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	VolumeMounts []volumeMount `yaml:"volumeMounts"`
}

type volumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
	ReadOnly  bool   `yaml:"readOnly"`
}

type volume struct {
	Name     string `yaml:"name"`
	HostPath *struct {
		Path string `yaml:"path"`
		Type string `yaml:"type"`
	} `yaml:"hostPath"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
	EmptyDir *struct {
		Medium    string `yaml:"medium"`
		SizeLimit string `yaml:"sizeLimit"`
	} `yaml:"emptyDir"`
}

// manifests holds every object of every *.yaml file here.
type manifests struct {
	files         []string
	namespaces    []namespace
	accounts      []serviceAccount
	configMaps    []configMap
	daemonSets    []daemonSet
	kustomization *kustomization
}

func strictDecode(t *testing.T, file string, doc []byte, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// splitDocs splits a multi-document YAML file, dropping empty documents.
func splitDocs(t *testing.T, file string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out, err := yaml.Marshal(&n)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		docs = append(docs, out)
	}
}

func load(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	m := manifests{files: files}
	for _, f := range files {
		for _, doc := range splitDocs(t, f) {
			var h header
			if err := yaml.Unmarshal(doc, &h); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch h.Kind {
			case "Namespace":
				var v namespace
				strictDecode(t, f, doc, &v)
				m.namespaces = append(m.namespaces, v)
			case "ServiceAccount":
				var v serviceAccount
				strictDecode(t, f, doc, &v)
				m.accounts = append(m.accounts, v)
			case "ConfigMap":
				var v configMap
				strictDecode(t, f, doc, &v)
				m.configMaps = append(m.configMaps, v)
			case "DaemonSet":
				var v daemonSet
				strictDecode(t, f, doc, &v)
				m.daemonSets = append(m.daemonSets, v)
			case "Kustomization":
				var v kustomization
				strictDecode(t, f, doc, &v)
				m.kustomization = &v
			default:
				t.Fatalf("%s: kind %q: not checked by this test", f, h.Kind)
			}
		}
	}
	if len(m.daemonSets) != 1 || len(m.configMaps) != 1 || len(m.accounts) != 1 || len(m.namespaces) != 1 || m.kustomization == nil {
		t.Fatalf("want one Namespace, ServiceAccount, ConfigMap, DaemonSet and Kustomization; got %d, %d, %d, %d, %v",
			len(m.namespaces), len(m.accounts), len(m.configMaps), len(m.daemonSets), m.kustomization != nil)
	}
	return m
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// mebibytes parses a Kubernetes memory quantity in Mi or Gi.
func mebibytes(t *testing.T, q string) float64 {
	t.Helper()
	for suffix, mult := range map[string]float64{"Mi": 1, "Gi": 1024, "MiB": 1, "GiB": 1024} {
		if v, ok := strings.CutSuffix(q, suffix); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f * mult
			}
		}
	}
	t.Fatalf("memory quantity %q: want a number of Mi or Gi", q)
	return 0
}

func TestManifestsLeastPrivilege(t *testing.T) {
	t.Parallel()
	m := load(t)
	ds := m.daemonSets[0]
	ns := m.namespaces[0].Metadata.Name
	for _, o := range []meta{ds.Metadata, m.configMaps[0].Metadata, m.accounts[0].Metadata} {
		if o.Namespace != ns {
			t.Errorf("%s: namespace %q, want %q", o.Name, o.Namespace, ns)
		}
	}
	pod := ds.Spec.Template.Spec
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels", k, v)
		}
	}

	// The pod: its own network, PID and IPC namespaces; in the host's user
	// namespace (kernel uevents reach only network namespaces owned by the
	// initial user namespace, and sysfs is root's); no API token.
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("hostNetwork %v, hostPID %v, hostIPC %v: kernel uevents need none of them", pod.HostNetwork, pod.HostPID, pod.HostIPC)
	}
	if pod.HostUsers != nil && !*pod.HostUsers {
		t.Error("hostUsers: false: a user namespace of its own would hear no kernel uevent and could not write sysfs")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken ||
		m.accounts[0].AutomountServiceAccountToken == nil || *m.accounts[0].AutomountServiceAccountToken {
		t.Error("the service account token must not be mounted: the daemon uses no Kubernetes API")
	}
	if pod.ServiceAccountName != m.accounts[0].Metadata.Name {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, m.accounts[0].Metadata.Name)
	}
	if len(pod.NodeSelector) == 0 {
		t.Error("no nodeSelector: the DaemonSet must run only on nodes that opted in (not those running the systemd unit)")
	}

	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc.Privileged == nil || *sc.Privileged {
		t.Error("privileged must be false, explicitly")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("runAsUser must be 0: the queue attributes are root's files (0644)")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation must be false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be true")
	}
	if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) || !slices.Equal(sc.Capabilities.Add, []string{"NET_ADMIN"}) {
		t.Errorf("capabilities drop %v add %v, want drop [ALL] add [NET_ADMIN]", sc.Capabilities.Drop, sc.Capabilities.Add)
	}
	if sc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("seccompProfile %q, want RuntimeDefault", sc.SeccompProfile.Type)
	}

	// Mounts: every host path is named here with why; the host's /sys is
	// where --sysfs points, writable; the state and runtime directories
	// are where the daemon's flags point, the disks' lock where it is on the
	// host; the policy is the ConfigMap.
	volumes := map[string]volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	if len(c.Args) == 0 || c.Args[0] != "daemon" {
		t.Fatalf("args %v: want the daemon command first", c.Args)
	}
	sysfsDir, _ := flagValue(c.Args, "sysfs")
	stateDir, _ := flagValue(c.Args, "state-dir")
	runtimeDir, _ := flagValue(c.Args, "runtime-dir")
	if _, ok := flagValue(c.Args, "policy"); ok {
		t.Error("--policy: the daemon must read the default locations, where the ConfigMap is mounted")
	}
	if _, ok := flagValue(c.Args, "dev"); ok {
		t.Error("--dev: an unprivileged container cannot open block devices; no /dev is mounted")
	}
	lockDir := filepath.Dir(paths.Default.DiskLock) // the daemon's, and the host's CLI's
	allowedHostPaths := map[string]string{"/sys": sysfsDir, "/var/lib/iosched": stateDir, lockDir: lockDir}
	mounted := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		v, ok := volumes[vm.Name]
		if !ok {
			t.Errorf("volumeMount %s: no such volume", vm.Name)
			continue
		}
		mounted[vm.Name] = true
		switch {
		case v.HostPath != nil:
			want, ok := allowedHostPaths[v.HostPath.Path]
			if !ok {
				t.Errorf("volume %s: host path %s is not one the daemon needs", v.Name, v.HostPath.Path)
			} else if vm.MountPath != want {
				t.Errorf("volume %s: host %s mounted at %s, but the daemon's flag says %q", v.Name, v.HostPath.Path, vm.MountPath, want)
			}
			if vm.ReadOnly {
				t.Errorf("volume %s: read-only, but the daemon writes %s", v.Name, v.HostPath.Path)
			}
			delete(allowedHostPaths, v.HostPath.Path)
		case v.ConfigMap != nil:
			if v.ConfigMap.Name != m.configMaps[0].Metadata.Name {
				t.Errorf("volume %s: ConfigMap %q, want %q", v.Name, v.ConfigMap.Name, m.configMaps[0].Metadata.Name)
			}
			if vm.MountPath != paths.Default.PolicyDir || !vm.ReadOnly {
				t.Errorf("policy mounted at %s (read-only %v), want %s read-only", vm.MountPath, vm.ReadOnly, paths.Default.PolicyDir)
			}
		case v.EmptyDir != nil:
			if vm.MountPath != runtimeDir {
				t.Errorf("volume %s: emptyDir at %s, but --runtime-dir is %q", v.Name, vm.MountPath, runtimeDir)
			}
		default:
			t.Errorf("volume %s: no source this test knows", v.Name)
		}
	}
	for p := range allowedHostPaths {
		t.Errorf("host path %s is not mounted", p)
	}
	for name := range volumes {
		if !mounted[name] {
			t.Errorf("volume %s is not mounted", name)
		}
	}

	// Resources: both requested and limited; the limit above the measured
	// peak (17-18 MiB with 1000 disks) with room, and the Go heap limit
	// below it.
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" || c.Resources.Limits[r] == "" {
			t.Errorf("resources: %s must be requested and limited", r)
		}
	}
	limit := mebibytes(t, c.Resources.Limits["memory"])
	request := mebibytes(t, c.Resources.Requests["memory"])
	if request < 18 || limit < 2*18 || request > limit {
		t.Errorf("memory request %v Mi, limit %v Mi: want at least the measured peak (18 Mi) requested, twice it as the limit", request, limit)
	}
	var gomemlimit string
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			gomemlimit = e.Value
		}
	}
	if gomemlimit == "" || mebibytes(t, gomemlimit) >= limit {
		t.Errorf("GOMEMLIMIT %q: want one below the memory limit (%v Mi)", gomemlimit, limit)
	}

	// Every manifest is in the kustomization.
	for _, f := range m.files {
		if f != "kustomization.yaml" && !slices.Contains(m.kustomization.Resources, f) {
			t.Errorf("%s is not in kustomization.yaml", f)
		}
	}
}

// The ConfigMap's policy passes the real parser, in kernel mode (udevd's
// events would not reach a pod without hostNetwork).
func TestConfigMapPolicy(t *testing.T) {
	t.Parallel()
	m := load(t)
	cm := m.configMaps[0]
	if len(cm.Data) == 0 {
		t.Fatal("the ConfigMap holds no policy")
	}
	var files []policy.File
	for key, data := range cm.Data {
		if !strings.HasSuffix(key, ".toml") || strings.HasPrefix(key, ".") {
			t.Errorf("key %q: the daemon reads only *.toml files not starting with a dot", key)
		}
		files = append(files, policy.File{Name: "configmap.yaml:" + key, Data: []byte(data)})
	}
	slices.SortFunc(files, func(a, b policy.File) int { return strings.Compare(a.Name, b.Name) })
	p, err := policy.Parse(files...)
	if err != nil {
		t.Fatalf("the ConfigMap's policy: %v", err)
	}
	if len(p.Rules) == 0 {
		t.Error("the ConfigMap's policy has no rule")
	}
	if p.Daemon.UeventSource != "kernel" {
		t.Errorf("uevent_source %q: the pod has no host network, so only kernel uevents reach it", p.Daemon.UeventSource)
	}
}

// The Containerfile builds the binary static, as packaging/build.sh does,
// onto an image with no libc. Its build command, run here, must give a
// binary with no program interpreter and no dynamic section.
func TestContainerfileStatic(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	var build string
	for _, line := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(line, "FROM "); ok {
			froms = append(froms, strings.Fields(f)[0])
		}
		if strings.HasPrefix(line, "RUN ") && strings.Contains(line, " go build ") {
			build = line
		}
	}
	if len(froms) < 2 {
		t.Fatalf("FROM lines %v: want a build stage and a runtime stage", froms)
	}
	final := froms[len(froms)-1]
	if final != "scratch" && !regexp.MustCompile(`^gcr\.io/distroless/static(-debian\d+)?([:@].*)?$`).MatchString(final) {
		t.Errorf("final image %s: want distroless/static or scratch", final)
	}
	if !strings.Contains(build, "CGO_ENABLED=0") || !strings.HasSuffix(build, "./cmd/iosched") {
		t.Fatalf("build line %q: want CGO_ENABLED=0 go build ... ./cmd/iosched", build)
	}
	ldflags := regexp.MustCompile(`-ldflags "([^"]*)"`).FindStringSubmatch(build)
	if ldflags == nil {
		t.Fatalf("build line %q: no -ldflags", build)
	}
	out := filepath.Join(t.TempDir(), "iosched")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", strings.ReplaceAll(ldflags[1], "${VERSION}", "test"), "-o", out, "./cmd/iosched")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, o)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: not static", p.Type)
		}
	}
}
