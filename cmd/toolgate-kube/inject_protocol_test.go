package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestPortProtocolsReadNamesProbesAndNumbers(t *testing.T) {
	httpProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(6379)}}}
	httpsProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("api"), Scheme: corev1.URISchemeHTTPS}}}
	grpcProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 3550}}}
	for _, c := range []struct {
		name      string
		port      appPort
		readiness *corev1.Probe
		want      string // "" for plain HTTP/1
	}{
		{"a port named http", appPort{name: "http", number: 9080}, nil, ""},
		{"a port named http-api", appPort{name: "http-api", number: 9080}, nil, ""},
		{"a port named grpc", appPort{name: "grpc", number: 9080}, nil, "gRPC"},
		{"a port named grpc-web-admin", appPort{name: "grpc-web-admin", number: 9080}, nil, "gRPC-Web"},
		{"a port named https", appPort{name: "https", number: 8080}, nil, "TLS"},
		{"a port named h2c", appPort{name: "h2c", number: 8080}, nil, "HTTP/2 without TLS (h2c)"},
		{"a port named tcp-redis", appPort{name: "tcp-redis", number: 6379}, nil, "TCP"},
		{"a port named web, whose name says nothing", appPort{name: "web", number: 8080}, nil, ""},
		{"an unnamed port with a gRPC probe", appPort{number: 3550}, grpcProbe, "gRPC"},
		{"a named port with an HTTPS probe", appPort{name: "api", number: 8443}, httpsProbe, "TLS"},
		{"an unnamed Redis port", appPort{number: 6379}, nil, "Redis"},
		{"an unnamed 6379 with an HTTP probe", appPort{number: 6379}, httpProbe, ""},
		{"an unnamed port of no known protocol", appPort{number: 8000}, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.port.container = "app"
			spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "app", ReadinessProbe: c.readiness}}}
			if got := containerPortProtocol(spec, c.port); got.name != c.want {
				t.Errorf("%v, want %q", got, c.want)
			}
		})
	}
	ap := func(s string) *string { return &s }
	for _, c := range []struct {
		name string
		sp   corev1.ServicePort
		want string
	}{
		{"appProtocol http", corev1.ServicePort{Name: "grpc", AppProtocol: ap("http")}, ""},
		{"appProtocol kubernetes.io/h2c", corev1.ServicePort{Name: "http", AppProtocol: ap("kubernetes.io/h2c")}, "HTTP/2 without TLS (h2c)"},
		{"appProtocol grpc", corev1.ServicePort{AppProtocol: ap("grpc")}, "gRPC"},
		{"a domain-prefixed appProtocol", corev1.ServicePort{AppProtocol: ap("example.com/custom")}, "example.com/custom"},
		{"a port named https", corev1.ServicePort{Name: "https"}, "TLS"},
		{"an unnamed port", corev1.ServicePort{Port: 80}, ""},
	} {
		t.Run("Service "+c.name, func(t *testing.T) {
			if got := servicePortProtocol(c.sp); got.name != c.want {
				t.Errorf("%v, want %q", got, c.want)
			}
		})
	}
}
