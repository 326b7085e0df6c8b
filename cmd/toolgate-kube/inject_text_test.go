package main

import (
	"strings"
	"testing"
)

// TestInjectEditsTextInEveryLayout injects pod specs written in the
// layouts the text edits must handle: each output decodes strictly, holds
// the typed path's pod, keeps the input's lines (where the text can be
// edited) and comes through a second run unchanged.
func TestInjectEditsTextInEveryLayout(t *testing.T) {
	head := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec:\n  selector: {matchLabels: {app: a}}\n  template:\n    metadata: {labels: {app: a}}\n"
	for _, c := range []struct {
		name, spec string
		// kept: every line of the input is in the output, in order
		kept bool
	}{
		{
			name: "a comment between two containers stays between them",
			spec: "    spec:\n      containers:\n      - name: a\n        ports:\n        - containerPort: 8000\n      # a sidecar the team runs\n      - name: b\n        image: b\n      dnsPolicy: ClusterFirst\n",
			kept: true,
		},
		{
			name: "a comment between two volumes stays between them",
			spec: "    spec:\n      containers:\n      - {name: a, ports: [{containerPort: 8000}]}\n      volumes:\n      - name: x\n        emptyDir: {}\n      # scratch space\n      - name: scratch\n        emptyDir: {}\n      dnsPolicy: ClusterFirst\n",
			kept: true,
		},
		{
			name: "empty volumes and init containers written as [] and null",
			spec: "    spec:\n      initContainers: null\n      containers:\n        - name: a\n          ports:\n            - containerPort: 8000\n      volumes: []\n",
		},
		{
			name: "a spec in flow style",
			spec: "    spec: {containers: [{name: a, ports: [{containerPort: 8000}]}], terminationGracePeriodSeconds: 10}\n",
		},
		{
			name: "the last line without a line break",
			spec: "    spec:\n      containers:\n      - name: a\n        ports:\n        - containerPort: 8000",
			kept: true,
		},
		{
			name: "a grace period with a comment of its own",
			spec: "    spec:\n      terminationGracePeriodSeconds: 10 # the team's\n      containers:\n      - name: a\n        ports:\n        - containerPort: 8000\n",
		},
		{
			name: "a Service whose targetPort is a quoted name, a comment after a tab",
			spec: "    spec:\n      containers:\n      - name: a\t# the app\n        ports:\n        - {name: http, containerPort: 8000}\n" +
				"---\napiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec:\n  selector: {app: a}\n  ports:\n  - port: 80 # the agents' port\n    targetPort: \"http\" # the app's\n",
		},
		{
			name: "keys in an unusual order, containers last",
			spec: "    spec:\n      volumes:\n      - name: x\n        emptyDir: {}\n      initContainers:\n      - name: setup\n        image: s\n      containers:\n      - name: a\n        ports:\n        - containerPort: 8000\n",
			kept: true,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := head + c.spec
			args := []string{"-image", testImage, "-container", "a", "-port", "8000", "-service"}
			out, notes, code := runInjectArgs(t, args, in)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, notes)
			}
			objs := decodeOutput(t, out)
			if len(injected(objs)) != 1 {
				t.Fatalf("not injected:\n%s", out)
			}
			checkTypedParity(t, args[2:], in, objs)
			for _, svc := range objs.services {
				if got := svc.Spec.Ports[0].TargetPort.IntValue(); got != 8080 {
					t.Errorf("Service %s leads to %d, want toolgate's 8080:\n%s", svc.Name, got, out)
				}
			}
			if c.kept {
				if l := linesKept(in, out); l != "" {
					t.Errorf("the output lost or moved the line %q:\n%s", l, out)
				}
			}
			again, _, code := runInjectArgs(t, args, out)
			if code != 0 || again != out {
				t.Errorf("a second run changed the output:\n%s", again)
			}
			if strings.Contains(c.spec, "terminationGracePeriodSeconds") && strings.Count(out, "terminationGracePeriodSeconds") != 1 {
				t.Errorf("the grace period is set twice:\n%s", out)
			}
		})
	}
}
