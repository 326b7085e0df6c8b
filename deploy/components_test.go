package deploy

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	sigsjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/internal/testkit/sidecartest"
)

// TestComponentAddsTheSidecar renders a user's kustomization that uses
// components/sidecar (testdata/component: a Deployment with an init
// container, a StatefulSet, a Job, one workload left alone, their
// Services and a policy) with kustomize's library, decodes the result
// strictly and holds every annotated workload to the checks toolgate
// inject's output passes.
func TestComponentAddsTheSidecar(t *testing.T) {
	r := render(t, "testdata/component")
	want := func(app int32) sidecartest.Want {
		return sidecartest.Want{Image: "registry.example.com/toolgate:0.2.0", Policy: "toolgate-policy", AgentPort: 8080, AdminPort: 9090, AppPort: app}
	}
	for key, app := range map[string]int32{"Deployment/orders-api": 8000, "StatefulSet/ledger": 7000, "Job/report": 8081} {
		t.Run(key, func(t *testing.T) {
			tmpl, ok := r.templates[key]
			if !ok {
				t.Fatalf("no %s rendered", key)
			}
			sidecartest.Check(t, tmpl.Spec, want(app))
			if _, i := sidecartest.Sidecar(t, tmpl.Spec); i != 0 {
				t.Errorf("toolgate is init container %d; the other init containers must run after it starts", i)
			}
		})
	}
	t.Run("the existing init container stays", func(t *testing.T) {
		spec := r.templates["Deployment/orders-api"].Spec
		if len(spec.InitContainers) != 2 || spec.InitContainers[1].Name != "migrate" {
			t.Errorf("init containers %v, want toolgate then migrate", names(spec.InitContainers))
		}
	})
	t.Run("a workload without the annotation is left alone", func(t *testing.T) {
		spec := r.templates["Deployment/frontend"].Spec
		if len(spec.InitContainers) != 0 || len(spec.Volumes) != 0 {
			t.Errorf("frontend was changed: %v", names(spec.InitContainers))
		}
		if got := r.services["frontend"].Spec.Ports[0].TargetPort.IntValue(); got != 3000 {
			t.Errorf("frontend's Service targets %d, want 3000 as written", got)
		}
	})
	t.Run("the annotated Service leads to toolgate", func(t *testing.T) {
		tmpl := r.templates["Deployment/orders-api"]
		api := tmpl.Spec.Containers[0]
		sidecartest.AppPortClosed(t, tmpl.Labels, api, 8000, []corev1.Service{*r.services["orders-api"]}, []networkingv1.NetworkPolicy{})
		if got := r.services["orders-api"].Spec.Ports[0].TargetPort.IntValue(); got != 8080 {
			t.Errorf("orders-api's Service targets %d, want toolgate's 8080", got)
		}
	})
	t.Run("the policy fits the sidecar", func(t *testing.T) {
		cm := r.configMaps["toolgate-policy"]
		if cm == nil {
			t.Fatal("no ConfigMap toolgate-policy")
		}
		dir := t.TempDir()
		for name, content := range cm.Data {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// Loaded as the sidecar loads it: its -listen and -admin over the
		// policy's addresses, which the example does not set.
		tg, _ := sidecartest.Sidecar(t, r.templates["Deployment/orders-api"].Spec)
		snap, err := config.Load(dir, config.Options{
			LookupEnv:   func(string) (string, bool) { return "", false },
			Listen:      sidecartest.Flag(tg, "listen"),
			AdminListen: sidecartest.Flag(tg, "admin"),
		})
		if err != nil {
			t.Fatalf("the component's example policy fails toolgate check:\n%v", err)
		}
		if snap.Server.Listen != ":8080" || snap.Server.AdminListen != ":9090" {
			t.Errorf("listen %s admin %s, want :8080 and :9090 (the component's ports)", snap.Server.Listen, snap.Server.AdminListen)
		}
		if u := snap.Upstreams["orders"].URL; u.Hostname() != "127.0.0.1" || u.Port() != strconv.Itoa(8000) {
			t.Errorf("upstream %s, want the application's port over loopback", u)
		}
	})
}

// TestComponentIsTheSidecarInjectAdds keeps the component's files and the
// embedded copy the binary reads one and the same.
func TestComponentIsTheSidecarInjectAdds(t *testing.T) {
	data, err := os.ReadFile("components/sidecar/sidecar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != string(Sidecar()) {
		t.Error("Sidecar() differs from components/sidecar/sidecar.yaml")
	}
	k, err := os.ReadFile("components/sidecar/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"Deployment", "StatefulSet", "DaemonSet", "Job"} {
		if !strings.Contains(string(k), "kind: "+kind) {
			t.Errorf("the component does not patch %s", kind)
		}
	}
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return slices.Clip(out)
}

// TestBaseRunsTheComponentsSidecar keeps the toolgate container of
// deploy/base (and of the overlays built on it) the very container of
// components/sidecar/sidecar.yaml, which toolgate-kube inject and the
// webhook add: the base is the complete example, so it must not be a
// variant of it.
func TestBaseRunsTheComponentsSidecar(t *testing.T) {
	js, err := sigsyaml.YAMLToJSONStrict(Sidecar())
	if err != nil {
		t.Fatal(err)
	}
	var patch appsv1.Deployment
	strict, err := sigsjson.UnmarshalStrict(js, &patch)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err != nil {
		t.Fatal(err)
	}
	want, wantVolume := patch.Spec.Template.Spec.InitContainers[0], patch.Spec.Template.Spec.Volumes[0]
	for _, dir := range []string{"base", "overlays/single", "overlays/replicated"} {
		t.Run(dir, func(t *testing.T) {
			spec := render(t, dir).deployments["legacy-tools"].Spec.Template.Spec
			got := sidecar(t, spec)
			w := *want.DeepCopy()
			w.Image = got.Image
			if !equality.Semantic.DeepEqual(got, w) {
				t.Errorf("the toolgate container differs from the component's:\n got %+v\nwant %+v", got, w)
			}
			i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == wantVolume.Name })
			if i < 0 || !equality.Semantic.DeepEqual(spec.Volumes[i], wantVolume) {
				t.Errorf("no volume %+v, the component's", wantVolume)
			}
		})
	}
}
