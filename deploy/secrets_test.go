package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/policy"
)

// TestSecretsExample renders deploy/examples/secrets and loads its policy
// the way the pod will: every ${VAR} must come from the toolgate
// container's environment, filled from a key of a rendered Secret; the
// files Secret must be mounted read-only outside the policy directory, in
// toolgate's container only.
func TestSecretsExample(t *testing.T) {
	r := render(t, "examples/secrets")
	d := r.deployments["legacy-tools"]
	if d == nil {
		t.Fatal("no Deployment legacy-tools")
	}
	spec := d.Spec.Template.Spec
	tg := sidecar(t, spec)
	checkSidecar(t, r, d, checkPolicyWithEnv(t, r, d, tg))
	checkPodSecurity(t, spec)

	for _, c := range spec.Containers {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				t.Errorf("legacy container %s gets toolgate's secret %s", c.Name, e.Name)
			}
		}
	}
	secret := r.secrets["toolgate-upstream-auth"]
	if secret == nil {
		t.Fatal("no Secret toolgate-upstream-auth")
	}
	var mounted bool
	for _, v := range spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName != secret.Name {
			continue
		}
		for _, m := range tg.VolumeMounts {
			if m.Name != v.Name {
				continue
			}
			mounted = true
			if !m.ReadOnly || m.SubPath != "" {
				t.Errorf("the Secret is mounted %+v: want read-only, as a directory", m)
			}
			if strings.HasPrefix(filepath.Clean(m.MountPath)+"/", "/etc/toolgate/") {
				t.Errorf("the Secret is mounted at %s, inside the policy directory", m.MountPath)
			}
		}
		for _, c := range spec.Containers {
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name {
					t.Errorf("legacy container %s mounts toolgate's Secret", c.Name)
				}
			}
		}
		if mode := v.Secret.DefaultMode; mode == nil || *mode&0o007 != 0 {
			t.Errorf("defaultMode %v: the files must not be world-readable", mode)
		} else if fsGroup, group := spec.SecurityContext.FSGroup, spec.SecurityContext.RunAsGroup; fsGroup == nil || group == nil || *fsGroup != *group {
			t.Error("the files are readable by their group only: the pod's fsGroup must be toolgate's group")
		}
	}
	if !mounted {
		t.Error("the Secret toolgate-upstream-auth is not mounted in toolgate")
	}
	checkLegacyPortsClosed(t, r, d)
}

// checkPolicyWithEnv loads the ConfigMap's policy with ${VAR} resolved as
// the kubelet fills toolgate's environment from Secrets.
func checkPolicyWithEnv(t *testing.T, r *rendered, d *appsv1.Deployment, tg corev1.Container) *policy.Snapshot {
	t.Helper()
	env := map[string]string{}
	for _, e := range tg.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s := r.secrets[ref.Name]
			if s == nil {
				t.Fatalf("env %s reads Secret %s, which is not rendered", e.Name, ref.Name)
			}
			v, ok := s.StringData[ref.Key]
			if !ok {
				b, ok := s.Data[ref.Key]
				if !ok {
					t.Fatalf("env %s reads key %s, which Secret %s lacks", e.Name, ref.Key, ref.Name)
				}
				v = string(b)
			}
			env[e.Name] = v
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		}
	}
	cm := r.configMaps["toolgate-policy"]
	dir := t.TempDir()
	for name, content := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(cm.Data) < 2 {
		t.Fatalf("the ConfigMap has %d policy files, want the base's and crm.yaml", len(cm.Data))
	}
	snap, err := config.Load(dir, config.Options{LookupEnv: func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}})
	if err != nil {
		t.Fatalf("the policy does not load with toolgate's environment %v:\n%v", keys(env), err)
	}
	if snap.Tools["find_customer"] == nil {
		t.Error("crm.yaml's tool is not in the merged policy")
	}
	return snap
}

func keys(m map[string]string) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return fmt.Sprint(out)
}
