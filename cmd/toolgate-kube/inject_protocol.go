package main

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// toolgate's agent port serves plain HTTP/1 (and calls its upstreams over
// HTTP/1 or HTTPS). A port that speaks anything else (gRPC, HTTP/2
// without TLS, TLS, Redis, a database's protocol) must never be moved
// behind it: its clients would send bytes toolgate cannot read. The
// evidence, strongest first: the port's name (Istio's convention,
// protocol[-suffix], which many charts follow), a Service port's
// appProtocol, the container's probes on the port, and, for an unnamed
// port without an HTTP probe, the well-known port numbers.

// portProtocol is what a port is known to speak.
type portProtocol struct {
	// name is the protocol ("gRPC", "TLS", "Redis"); empty when the port
	// is plain HTTP/1 or nothing says otherwise.
	name string
	// why says what told: `its name "grpc"`, `its readiness probe`.
	why string
	// http: something positively says plain HTTP (a name http-..., an
	// HTTP probe, appProtocol http).
	http bool
}

// plain reports whether toolgate may front the port.
func (p portProtocol) plain() bool { return p.name == "" }

func (p portProtocol) String() string {
	if p.plain() {
		return "plain HTTP/1"
	}
	return fmt.Sprintf("%s (%s)", p.name, p.why)
}

// protocolsByName maps the first part of a port name (Istio's
// protocol[-suffix] convention) to the protocol it names; "" is plain
// HTTP/1.
var protocolsByName = map[string]string{
	"http":       "",
	"http2":      "HTTP/2",
	"h2c":        "HTTP/2 without TLS (h2c)",
	"grpc":       "gRPC",
	"grpc-web":   "gRPC-Web",
	"https":      "TLS",
	"tls":        "TLS",
	"tcp":        "TCP",
	"udp":        "UDP",
	"sctp":       "SCTP",
	"ws":         "WebSocket",
	"wss":        "WebSocket over TLS",
	"redis":      "Redis",
	"mongo":      "MongoDB",
	"mongodb":    "MongoDB",
	"mysql":      "MySQL",
	"postgres":   "PostgreSQL",
	"postgresql": "PostgreSQL",
	"amqp":       "AMQP",
	"kafka":      "Kafka",
	"memcache":   "memcached",
	"memcached":  "memcached",
	"zookeeper":  "ZooKeeper",
	"cql":        "Cassandra",
	"cassandra":  "Cassandra",
	"dns":        "DNS",
	"smtp":       "SMTP",
	"ssh":        "SSH",
	"mqtt":       "MQTT",
	"nats":       "NATS",
	"ldap":       "LDAP",
	"ldaps":      "LDAP over TLS",
}

// wellKnownPorts are ports whose number alone, on an unnamed port
// without an HTTP probe, says what they speak.
var wellKnownPorts = map[int32]string{
	22:    "SSH",
	25:    "SMTP",
	53:    "DNS",
	389:   "LDAP",
	443:   "TLS",
	636:   "LDAP over TLS",
	1883:  "MQTT",
	2181:  "ZooKeeper",
	2379:  "etcd (gRPC)",
	3306:  "MySQL",
	4222:  "NATS",
	5432:  "PostgreSQL",
	5672:  "AMQP",
	6379:  "Redis",
	6443:  "TLS",
	8443:  "TLS",
	9042:  "Cassandra",
	9092:  "Kafka",
	11211: "memcached",
	27017: "MongoDB",
	50051: "gRPC",
}

// nameProtocol reads a port name: the protocol it names ("" for plain
// HTTP/1), and whether it names one at all. The longest known prefix
// wins: "grpc-web-admin" is gRPC-Web, "http-metrics" plain HTTP.
func nameProtocol(name string) (string, bool) {
	parts := strings.Split(strings.ToLower(name), "-")
	for i := len(parts); i >= 1; i-- {
		if p, ok := protocolsByName[strings.Join(parts[:i], "-")]; ok {
			return p, true
		}
	}
	return "", false
}

// appProtocolName reads a Service port's appProtocol: "http" is plain;
// any other value (kubernetes.io/h2c, grpc, a domain-prefixed name) says
// the port speaks something else.
func appProtocolName(ap string) string {
	switch strings.ToLower(ap) {
	case "http", "kubernetes.io/http":
		return ""
	case "kubernetes.io/h2c":
		return "HTTP/2 without TLS (h2c)"
	case "kubernetes.io/ws":
		return "WebSocket"
	case "kubernetes.io/wss":
		return "WebSocket over TLS"
	}
	if p, ok := nameProtocol(ap); ok && p != "" {
		return p
	}
	return ap
}

// containerPortProtocol says what a pod's application port speaks, from
// what the pod itself declares: the port's name, the probes of its
// container on it, its number. The webhook sees no more than this.
func containerPortProtocol(spec *corev1.PodSpec, app appPort) portProtocol {
	var c *corev1.Container
	for i := range spec.Containers {
		if spec.Containers[i].Name == app.container {
			c = &spec.Containers[i]
		}
	}
	if app.name != "" {
		if p, ok := nameProtocol(app.name); ok {
			return portProtocol{name: p, why: fmt.Sprintf("its name %q", app.name), http: p == ""}
		}
	}
	var http bool
	if c != nil {
		for _, pr := range []struct {
			what  string
			probe *corev1.Probe
		}{{"readiness probe", c.ReadinessProbe}, {"liveness probe", c.LivenessProbe}, {"startup probe", c.StartupProbe}} {
			p := pr.probe
			switch {
			case p == nil:
			case p.GRPC != nil && p.GRPC.Port == app.number:
				return portProtocol{name: "gRPC", why: "its " + pr.what + " is a gRPC health check"}
			case p.HTTPGet != nil && probeOnPort(p.HTTPGet.Port, *c, app):
				if p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
					return portProtocol{name: "TLS", why: "its " + pr.what + " uses HTTPS"}
				}
				http = true
			}
		}
	}
	if http {
		return portProtocol{http: true}
	}
	if p, ok := wellKnownPorts[app.number]; ok && app.name == "" {
		return portProtocol{name: p, why: fmt.Sprintf("port %d is %s's", app.number, p)}
	}
	return portProtocol{}
}

// probeOnPort reports whether a probe's port is the application port.
func probeOnPort(p intstr.IntOrString, c corev1.Container, app appPort) bool {
	if p.Type == intstr.String {
		return app.name != "" && p.StrVal == app.name
	}
	return p.IntVal == app.number
}

// servicePortProtocol says what a Service port speaks, from its
// appProtocol and its name.
func servicePortProtocol(sp corev1.ServicePort) portProtocol {
	if sp.AppProtocol != nil && *sp.AppProtocol != "" {
		p := appProtocolName(*sp.AppProtocol)
		return portProtocol{name: p, why: fmt.Sprintf("its appProtocol %q", *sp.AppProtocol), http: p == ""}
	}
	if p, ok := nameProtocol(sp.Name); ok {
		return portProtocol{name: p, why: fmt.Sprintf("its name %q", sp.Name), http: p == ""}
	}
	return portProtocol{}
}
