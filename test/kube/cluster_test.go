package kube

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testCA is a certificate authority for the test's servers: the API
// server's serving certificate, and the webhook's.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "toolgate e2e CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// pool is a certificate pool holding the CA.
func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue writes a serving certificate for 127.0.0.1 and its key to
// dir/name.crt and dir/name.key.
func (ca *testCA) issue(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return certFile, keyFile
}

func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// freeAddr returns a loopback address with a port free at the moment.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proc is a program the test started.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
}

// process starts a program of the test, its output in dir/name.log, and
// stops it when the test ends.
func process(t *testing.T, dir, name, program string, args ...string) *proc {
	t.Helper()
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: exec.Command(program, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(p.stop)
	return p
}

// stop ends the program: SIGTERM, then SIGKILL after 15 s.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cluster is a kube-apiserver and its etcd, on loopback.
type cluster struct {
	bin        string // kube-apiserver, etcd and kubectl
	dir        string
	server     string // https://127.0.0.1:PORT
	kubeconfig string
}

// e2eToken is the static token of the test's user, in system:masters.
const e2eToken = "toolgate-e2e-token"

// startCluster starts etcd and kube-apiserver from TOOLGATE_KUBE_BIN and
// waits until the API server is ready; the test skips without it.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	bin := os.Getenv("TOOLGATE_KUBE_BIN")
	if bin == "" {
		t.Skip("TOOLGATE_KUBE_BIN is not set: make e2e-kube builds kube-apiserver, etcd and kubectl (test/kube/build.sh) and runs this test")
	}
	for _, p := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			t.Fatalf("TOOLGATE_KUBE_BIN=%s: %v (test/kube/build.sh builds it)", bin, err)
		}
	}
	c := &cluster{bin: bin, dir: t.TempDir()}
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, c.dir, "apiserver")
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	saDER, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		t.Fatal(err)
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(c.dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saDER}))
	writeFile(t, filepath.Join(c.dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}))
	writeFile(t, filepath.Join(c.dir, "tokens.csv"), []byte(e2eToken+",toolgate-e2e,toolgate-e2e,system:masters\n"))

	etcdClient, etcdPeer := "http://"+freeAddr(t), "http://"+freeAddr(t)
	start := time.Now()
	process(t, c.dir, "etcd", filepath.Join(bin, "etcd"),
		"--name=e2e", "--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls="+etcdClient, "--advertise-client-urls="+etcdClient,
		"--listen-peer-urls="+etcdPeer, "--initial-advertise-peer-urls="+etcdPeer,
		"--initial-cluster=e2e="+etcdPeer, "--log-level=warn", "--unsafe-no-fsync")
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	process(t, c.dir, "kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers="+etcdClient,
		"--bind-address=127.0.0.1", "--secure-port="+port, "--advertise-address=127.0.0.1",
		// The API server's own Service endpoints would be the loopback
		// address, which it refuses: nothing here needs them.
		"--endpoint-reconciler-type=none",
		"--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(c.dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(c.dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--token-auth-file="+filepath.Join(c.dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--profiling=false")
	c.server = "https://" + addr
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool()}}}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, c.server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+e2eToken)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(c.dir, "kube-apiserver.log"))
			t.Fatalf("kube-apiserver not ready after 3 minutes (%v):\n%s", err, tail(log, 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("etcd and kube-apiserver ready on %s in %v", c.server, time.Since(start).Round(time.Millisecond))
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	writeFile(t, c.kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: e2e
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e, namespace: e2e}
current-context: e2e
`, c.server, base64.StdEncoding.EncodeToString(ca.certPEM), e2eToken))
	return c
}

// tail returns the last n lines of a log.
func tail(log []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// kubectl runs kubectl against the cluster, stdin as its input.
func (c *cluster) kubectl(stdin string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(filepath.Join(c.bin, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// must runs kubectl and fails the test when it fails.
func (c *cluster) must(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := c.kubectl(stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}
