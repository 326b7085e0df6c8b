// Package envoy holds the Envoy examples for `toolgate extproc`: a bootstrap
// that routes the example legacy services through the processor
// (envoy.yaml) and an Istio EnvoyFilter for a sidecar-injected workload
// (istio-envoyfilter.yaml). The tests decode both strictly into Envoy's own
// protos (unknown fields are errors, typed configs resolve to their types,
// the generated validation rules run) and check every setting the
// processor relies on against the processor and the example policy.
package envoy

import (
	"encoding/json"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/extproc"
)

// extprocPort is the port of `toolgate extproc`'s default -listen.
const extprocPort = 9002

// The typed configs the examples use. Importing their packages registers
// them, so protojson resolves each "@type".
var (
	_ = (*routerv3.Router)(nil)
	_ = (*upstreamhttpv3.HttpProtocolOptions)(nil)
)

// validator is implemented by every go-control-plane message: the rules
// Envoy itself enforces on its config (required fields, ranges).
type validator interface{ ValidateAll() error }

// decodeStrict decodes YAML into msg through protojson: unknown fields are
// errors and every Any must name a known type.
func decodeStrict(t *testing.T, what string, data []byte, msg proto.Message) {
	t.Helper()
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, msg); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if v, ok := msg.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func examplePolicy(t *testing.T) *policy.Snapshot {
	t.Helper()
	snap, err := config.Load("../../examples/policy.yaml", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// longestToolTimeout is the longest time a call may take, and so the
// longest a request message may wait for an earlier call with its key.
func longestToolTimeout(snap *policy.Snapshot) time.Duration {
	var d time.Duration
	for _, ct := range snap.Tools {
		d = max(d, ct.Timeout)
	}
	return d
}

// checkProcessor checks the ext_proc filter settings the processor needs.
func checkProcessor(t *testing.T, ep *extprocfilterv3.ExternalProcessor, snap *policy.Snapshot) {
	t.Helper()
	want := &extprocfilterv3.ProcessingMode{
		RequestHeaderMode:   extprocfilterv3.ProcessingMode_SEND,
		RequestBodyMode:     extprocfilterv3.ProcessingMode_BUFFERED,
		ResponseHeaderMode:  extprocfilterv3.ProcessingMode_SEND,
		ResponseBodyMode:    extprocfilterv3.ProcessingMode_BUFFERED,
		RequestTrailerMode:  extprocfilterv3.ProcessingMode_SKIP,
		ResponseTrailerMode: extprocfilterv3.ProcessingMode_SKIP,
	}
	if !proto.Equal(ep.GetProcessingMode(), want) {
		t.Errorf("processing_mode = %v, want %v", ep.GetProcessingMode(), want)
	}
	if ep.GetFailureModeAllow() {
		t.Error("failure_mode_allow: calls would pass unchecked while toolgate is down")
	}
	if ep.GetObservabilityMode() || ep.GetDisableImmediateResponse() {
		t.Error("the processor must be able to answer (observability_mode and disable_immediate_response off)")
	}
	if !ep.GetAllowModeOverride() {
		t.Error("allow_mode_override is off: passthrough requests would be buffered and processed")
	}
	if modes := ep.GetAllowedOverrideModes(); len(modes) != 1 || !proto.Equal(modes[0], extproc.PassthroughMode()) {
		t.Errorf("allowed_override_modes = %v, want exactly the processor's passthrough mode %v", modes, extproc.PassthroughMode())
	}
	if d := ep.GetMessageTimeout().AsDuration(); d <= longestToolTimeout(snap) {
		t.Errorf("message_timeout %v is not above the longest tool timeout %v: a call waiting for an earlier one with its key would fail", d, longestToolTimeout(snap))
	}
	if !slices.Contains(ep.GetResponseAttributes(), "response.code_details") {
		t.Error("response_attributes lacks response.code_details: local replies would be recognised by their texts only")
	}
	if ep.GetAllowContentLengthHeader() {
		t.Error("allow_content_length_header would let lengths of replaced bodies through unchecked")
	}
	if ep.GetMutationRules() != nil {
		t.Error("mutation_rules: the processor needs the defaults (:path, :status and headers may change)")
	}
	if ep.GetGrpcService().GetEnvoyGrpc().GetClusterName() == "" {
		t.Error("grpc_service must name the processor's cluster (envoy_grpc)")
	}
}

// checkProcessorCluster checks that the processor's cluster speaks HTTP/2
// to a loopback or named port.
func checkProcessorCluster(t *testing.T, c *clusterv3.Cluster, port uint32) {
	t.Helper()
	anyOpts, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if !ok {
		t.Fatalf("cluster %s: no HttpProtocolOptions: gRPC needs HTTP/2", c.GetName())
	}
	var opts upstreamhttpv3.HttpProtocolOptions
	if err := anyOpts.UnmarshalTo(&opts); err != nil {
		t.Fatal(err)
	}
	if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %s does not speak HTTP/2", c.GetName())
	}
	if got := clusterPort(c); got != port {
		t.Errorf("cluster %s port %d, want %d", c.GetName(), got, port)
	}
}

func clusterPort(c *clusterv3.Cluster) uint32 {
	for _, e := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range e.GetLbEndpoints() {
			return lb.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
		}
	}
	return 0
}

// httpFilters returns the HTTP filters of the listener's connection manager.
func connectionManager(t *testing.T, l *listenerv3.Listener) *hcmv3.HttpConnectionManager {
	t.Helper()
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			var hcm hcmv3.HttpConnectionManager
			if err := f.GetTypedConfig().UnmarshalTo(&hcm); err == nil {
				if err := hcm.ValidateAll(); err != nil {
					t.Fatal(err)
				}
				return &hcm
			}
		}
	}
	t.Fatalf("listener %s has no HTTP connection manager", l.GetName())
	return nil
}

func TestBootstrap(t *testing.T) {
	data, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	decodeStrict(t, "envoy.yaml", data, &bs)
	snap := examplePolicy(t)

	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	listeners := bs.GetStaticResources().GetListeners()
	if len(listeners) != 1 {
		t.Fatalf("%d listeners, want 1", len(listeners))
	}
	l := listeners[0]
	if limit := int64(l.GetPerConnectionBufferLimitBytes().GetValue()); limit <= snap.Server.MaxRequestBytes || limit <= snap.Server.MaxResponseBytes {
		t.Errorf("per_connection_buffer_limit_bytes %d must exceed max_request_bytes %d and max_response_bytes %d",
			limit, snap.Server.MaxRequestBytes, snap.Server.MaxResponseBytes)
	}
	hcm := connectionManager(t, l)
	if !hcm.GetPreserveExternalRequestId() {
		t.Error("preserve_external_request_id: the agent's X-Request-Id must be the call_id")
	}

	filters := hcm.GetHttpFilters()
	if len(filters) < 2 || filters[len(filters)-1].GetName() != "envoy.filters.http.router" {
		t.Fatal("the router must be the last HTTP filter")
	}
	var ep *extprocfilterv3.ExternalProcessor
	for _, f := range filters {
		var cfg extprocfilterv3.ExternalProcessor
		if f.GetTypedConfig().UnmarshalTo(&cfg) == nil {
			if ep != nil {
				t.Fatal("two ext_proc filters")
			}
			ep = &cfg
		}
	}
	if ep == nil {
		t.Fatal("no ext_proc filter")
	}
	if err := ep.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	checkProcessor(t, ep, snap)
	pc := clusters[ep.GetGrpcService().GetEnvoyGrpc().GetClusterName()]
	if pc == nil {
		t.Fatalf("no cluster %q for the processor", ep.GetGrpcService().GetEnvoyGrpc().GetClusterName())
	}
	checkProcessorCluster(t, pc, extprocPort)
	if len(pc.GetHealthChecks()) == 0 || pc.GetHealthChecks()[0].GetGrpcHealthCheck() == nil {
		t.Error("the processor's cluster should use the gRPC health check toolgate serves")
	}

	// Every tool's route leads to its upstream's port, with a route
	// timeout no shorter than the tool's.
	routes := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
	for _, name := range snap.ToolNames {
		ct := snap.Tools[name]
		t.Run(name, func(t *testing.T) {
			r := firstRoute(routes, ct.Binding.PathTemplate())
			if r == nil {
				t.Fatalf("no route for %s", ct.Binding.PathTemplate())
			}
			c := clusters[r.GetRoute().GetCluster()]
			if c == nil {
				t.Fatalf("route to unknown cluster %q", r.GetRoute().GetCluster())
			}
			u, err := url.Parse(snap.Upstreams[ct.Upstream].URL.String())
			if err != nil {
				t.Fatal(err)
			}
			if port, _ := strconv.Atoi(u.Port()); uint32(port) != clusterPort(c) {
				t.Errorf("cluster %s is on port %d, the upstream %s on %s", c.GetName(), clusterPort(c), ct.Upstream, u.Port())
			}
			if rt := r.GetRoute().GetTimeout(); rt != nil && rt.AsDuration() < ct.Timeout {
				t.Errorf("route timeout %v is shorter than the tool's %v", rt.AsDuration(), ct.Timeout)
			}
			if r.GetRoute().GetRetryPolicy() != nil && ct.SideEffect {
				t.Error("Envoy must not retry a side-effecting tool's requests")
			}
		})
	}
}

// firstRoute is the route a request on path takes (prefix routes only, as
// in the example).
func firstRoute(routes []*routev3.Route, path string) *routev3.Route {
	for _, r := range routes {
		if strings.HasPrefix(path, r.GetMatch().GetPrefix()) {
			return r
		}
	}
	return nil
}

// envoyFilter is the part of Istio's EnvoyFilter resource the example uses;
// the patch values are Envoy protos, decoded strictly below.
type envoyFilter struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		WorkloadSelector struct {
			Labels map[string]string `json:"labels"`
		} `json:"workloadSelector"`
		ConfigPatches []struct {
			ApplyTo string `json:"applyTo"`
			Match   struct {
				Context  string `json:"context"`
				Listener *struct {
					FilterChain struct {
						Filter struct {
							Name      string `json:"name"`
							SubFilter struct {
								Name string `json:"name"`
							} `json:"subFilter"`
						} `json:"filter"`
					} `json:"filterChain"`
				} `json:"listener"`
			} `json:"match"`
			Patch struct {
				Operation string          `json:"operation"`
				Value     json.RawMessage `json:"value"`
			} `json:"patch"`
		} `json:"configPatches"`
	} `json:"spec"`
}

func TestIstioEnvoyFilter(t *testing.T) {
	data, err := os.ReadFile("istio-envoyfilter.yaml")
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var ef envoyFilter
	dec := json.NewDecoder(strings.NewReader(string(js)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ef); err != nil {
		t.Fatal(err)
	}
	if ef.APIVersion != "networking.istio.io/v1alpha3" || ef.Kind != "EnvoyFilter" {
		t.Errorf("%s %s, want networking.istio.io/v1alpha3 EnvoyFilter", ef.APIVersion, ef.Kind)
	}
	if len(ef.Spec.WorkloadSelector.Labels) == 0 {
		t.Error("no workloadSelector: the filter would apply to every workload of the namespace")
	}
	snap := examplePolicy(t)
	var cluster *clusterv3.Cluster
	var ep *extprocfilterv3.ExternalProcessor
	for i, p := range ef.Spec.ConfigPatches {
		if p.Match.Context != "SIDECAR_INBOUND" {
			t.Errorf("patch %d applies to %s, want SIDECAR_INBOUND (requests to the workload)", i, p.Match.Context)
		}
		switch p.ApplyTo {
		case "CLUSTER":
			if p.Patch.Operation != "ADD" {
				t.Errorf("cluster patch operation %s", p.Patch.Operation)
			}
			cluster = &clusterv3.Cluster{}
			decodeStrict(t, "cluster patch", p.Patch.Value, cluster)
		case "HTTP_FILTER":
			if p.Patch.Operation != "INSERT_BEFORE" || p.Match.Listener == nil ||
				p.Match.Listener.FilterChain.Filter.Name != "envoy.filters.network.http_connection_manager" ||
				p.Match.Listener.FilterChain.Filter.SubFilter.Name != "envoy.filters.http.router" {
				t.Error("the filter must be inserted before the router of the HTTP connection manager")
			}
			var f hcmv3.HttpFilter
			decodeStrict(t, "filter patch", p.Patch.Value, &f)
			if f.GetName() != "envoy.filters.http.ext_proc" {
				t.Errorf("filter name %q", f.GetName())
			}
			ep = &extprocfilterv3.ExternalProcessor{}
			if err := f.GetTypedConfig().UnmarshalTo(ep); err != nil {
				t.Fatalf("typed_config: %v", err)
			}
			if err := ep.ValidateAll(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("unexpected patch of %s", p.ApplyTo)
		}
	}
	if cluster == nil || ep == nil {
		t.Fatal("want a CLUSTER and an HTTP_FILTER patch")
	}
	checkProcessor(t, ep, snap)
	if got := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != cluster.GetName() {
		t.Errorf("the filter calls cluster %q, the patch adds %q", got, cluster.GetName())
	}
	checkProcessorCluster(t, cluster, extprocPort)
}
