package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	t    *testing.T
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// serialNumber is a random certificate serial number.
func serialNumber(t *testing.T) *big.Int {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{t: t, cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a certificate for a server (its names: DNS names or IP
// addresses) or, without names, for a client.
func (ca *testCA) issue(cn string, names ...string) (tls.Certificate, []byte, []byte) {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(ca.t), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(names) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, n := range names {
			if ip := net.ParseIP(n); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, n)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		ca.t.Fatal(err)
	}
	return pair, certPEM, keyPEM
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// writeFile replaces a file's content in one rename, as cert-manager and
// the kubelet do.
func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tlsBackend starts an HTTPS backend with cert; clientCAs, when not nil,
// makes it require a client certificate they signed. It records the
// common name of the client certificate of each request.
func tlsBackend(t *testing.T, cert tls.Certificate, clientCAs *x509.CertPool) (*httptest.Server, *seenRequests) {
	t.Helper()
	seen := &seenRequests{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			r.Header.Set("X-Test-Client-CN", r.TLS.PeerCertificates[0].Subject.CommonName)
		}
		seen.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	if clientCAs != nil {
		srv.TLS.ClientAuth, srv.TLS.ClientCAs = tls.RequireAndVerifyClientCert, clientCAs
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, seen
}

func tlsPolicy(url, tlsBlock string) string {
	return fmt.Sprintf(`
version: 1
upstreams:
  billing:
    url: %s
    timeout: 5s
%s
tools:
  invoice:
    description: Read an invoice.
    upstream: billing
    args: {type: object}
    request: {method: GET, path: /invoice}
access: {shared_credentials: [billing]}
`, url, tlsBlock)
}

func TestClientCertificateRequired(t *testing.T) {
	ca := newTestCA(t, "billing CA")
	serverCert, _, _ := ca.issue("billing", "127.0.0.1")
	srv, seen := tlsBackend(t, serverCert, ca.pool())
	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeFile(t, caFile, ca.pem)
	_, clientPEM, clientKey := ca.issue("toolgate-client")
	writeFile(t, certFile, clientPEM)
	writeFile(t, keyFile, clientKey)

	t.Run("a certificate the backend trusts gets through", func(t *testing.T) {
		a := newAuthCore(t, tlsPolicy(srv.URL, fmt.Sprintf("    tls: {ca_file: %s, cert_file: %s, key_file: %s}", caFile, certFile, keyFile)), nil, Options{})
		res := a.callDirect("invoice", `{}`, nil)
		if res.Envelope.Status != contracts.StatusOK {
			t.Fatalf("%s: %+v", res.Reason, res.Envelope)
		}
		if cn := seen.last(t).Header.Get("X-Test-Client-CN"); cn != "toolgate-client" {
			t.Errorf("client certificate %q", cn)
		}
	})
	t.Run("without a certificate the backend refuses the connection", func(t *testing.T) {
		before := seen.count()
		a := newAuthCore(t, tlsPolicy(srv.URL, fmt.Sprintf("    tls: {ca_file: %s}", caFile)), nil, Options{})
		res := a.callDirect("invoice", `{}`, nil)
		if res.Envelope.Status == contracts.StatusOK || seen.count() != before {
			t.Fatalf("%s: %+v", res.Reason, res.Envelope)
		}
	})
	t.Run("a client certificate rotated while serving is used for new connections", func(t *testing.T) {
		other := newTestCA(t, "another CA")
		_, wrongPEM, wrongKey := other.issue("toolgate-client-old")
		writeFile(t, certFile, wrongPEM)
		writeFile(t, keyFile, wrongKey)
		a := newAuthCore(t, tlsPolicy(srv.URL, fmt.Sprintf("    tls: {ca_file: %s, cert_file: %s, key_file: %s}", caFile, certFile, keyFile)), nil, Options{})
		before := seen.count()
		if res := a.callDirect("invoice", `{}`, nil); res.Envelope.Status == contracts.StatusOK || seen.count() != before {
			t.Fatalf("a certificate of another CA: %s: %+v", res.Reason, res.Envelope)
		}
		_, newPEM, newKey := ca.issue("toolgate-client-new")
		writeFile(t, keyFile, newKey)
		writeFile(t, certFile, newPEM)
		a.clock.Add(upstream.FileCheckInterval)
		res := a.callDirect("invoice", `{}`, nil)
		if res.Envelope.Status != contracts.StatusOK {
			t.Fatalf("after the rotation: %s: %+v", res.Reason, res.Envelope)
		}
		if cn := seen.last(t).Header.Get("X-Test-Client-CN"); cn != "toolgate-client-new" {
			t.Errorf("client certificate %q", cn)
		}
	})
}

func TestPrivateCA(t *testing.T) {
	ca := newTestCA(t, "private CA")
	other := newTestCA(t, "another CA")
	dir := t.TempDir()
	caFile, otherFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "other.pem")
	writeFile(t, caFile, ca.pem)
	writeFile(t, otherFile, other.pem)
	ipCert, _, _ := ca.issue("billing", "127.0.0.1")
	ipServer, _ := tlsBackend(t, ipCert, nil)
	nameCert, _, _ := ca.issue("billing", "billing.internal")
	nameServer, _ := tlsBackend(t, nameCert, nil)
	for _, tc := range []struct {
		name       string
		url        string
		tls        string
		wantStatus contracts.Status
		wantReason contracts.Reason
	}{
		{name: "a backend certified by the ca_file is trusted", url: ipServer.URL,
			tls: "    tls: {ca_file: " + caFile + "}", wantStatus: contracts.StatusOK, wantReason: contracts.ReasonOK},
		{name: "without the ca_file the private CA is not trusted", url: ipServer.URL,
			wantStatus: contracts.StatusUpstream, wantReason: contracts.ReasonTLS},
		{name: "a ca_file of another CA does not trust it", url: ipServer.URL,
			tls: "    tls: {ca_file: " + otherFile + "}", wantStatus: contracts.StatusUpstream, wantReason: contracts.ReasonTLS},
		{name: "server_name names the certificate's host", url: nameServer.URL,
			tls: "    tls: {ca_file: " + caFile + ", server_name: billing.internal}", wantStatus: contracts.StatusOK, wantReason: contracts.ReasonOK},
		{name: "a certificate for another name is not trusted", url: nameServer.URL,
			tls: "    tls: {ca_file: " + caFile + "}", wantStatus: contracts.StatusUpstream, wantReason: contracts.ReasonTLS},
		{name: "server_name is checked as well", url: ipServer.URL,
			tls: "    tls: {ca_file: " + caFile + ", server_name: billing.internal}", wantStatus: contracts.StatusUpstream, wantReason: contracts.ReasonTLS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAuthCore(t, tlsPolicy(tc.url, tc.tls), nil, Options{})
			res := a.callDirect("invoice", `{}`, nil)
			if res.Envelope.Status != tc.wantStatus || res.Reason != tc.wantReason {
				t.Fatalf("%s: %+v, want %s (%s)", res.Reason, res.Envelope, tc.wantStatus, tc.wantReason)
			}
			if tc.wantReason == contracts.ReasonTLS && res.Envelope.Retryable {
				t.Error("a trust failure is retryable")
			}
		})
	}
	t.Run("a ca_file rotated while serving is trusted for new connections", func(t *testing.T) {
		rotating := filepath.Join(dir, "rotating.pem")
		writeFile(t, rotating, other.pem)
		a := newAuthCore(t, tlsPolicy(ipServer.URL, "    tls: {ca_file: "+rotating+"}"), nil, Options{})
		if res := a.callDirect("invoice", `{}`, nil); res.Reason != contracts.ReasonTLS {
			t.Fatalf("before: %s: %+v", res.Reason, res.Envelope)
		}
		// A bundle with both CAs, as during a CA rollover.
		writeFile(t, rotating, []byte(strings.Join([]string{string(other.pem), string(ca.pem)}, "")))
		a.clock.Add(upstream.FileCheckInterval)
		if res := a.callDirect("invoice", `{}`, nil); res.Envelope.Status != contracts.StatusOK {
			t.Fatalf("after: %s: %+v", res.Reason, res.Envelope)
		}
	})
}

func TestOAuth2TokenEndpointWithPrivateCA(t *testing.T) {
	ca := newTestCA(t, "identity CA")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	writeFile(t, caFile, ca.pem)
	cert, _, _ := ca.issue("idp", "127.0.0.1")
	te := &tokenEndpoint{t: t, expiresIn: 3600}
	idp := httptest.NewUnstartedServer(te)
	idp.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	idp.StartTLS()
	defer idp.Close()
	backend := &seenRequests{}
	srv := httptest.NewServer(backend)
	defer srv.Close()
	doc := fmt.Sprintf(`
version: 1
upstreams:
  fcm:
    url: %s
    auth:
      oauth2:
        token_url: %s/token
        client_id: fcm-client
        client_secret: fcm-secret
        tls: {ca_file: %s}
tools:
  lookup:
    description: Look up.
    upstream: fcm
    args: {type: object}
    request: {method: GET, path: /v1/devices}
access: {shared_credentials: [fcm]}
`, srv.URL, idp.URL, caFile)
	a := newAuthCore(t, doc, nil, Options{})
	res := a.callDirect("lookup", `{}`, nil)
	if res.Envelope.Status != contracts.StatusOK || backend.last(t).Header.Get("Authorization") != "Bearer tok-1" {
		t.Fatalf("%s: %+v", res.Reason, res.Envelope)
	}
}
