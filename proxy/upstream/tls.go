package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"

	"github.com/toolgate/toolgate/policy"
)

// newTLSConfig is the client TLS configuration of an https:// endpoint
// with a tls block (nil without one: Go's defaults, the system's roots).
// host is the URL's host name, which the server's certificate must carry
// unless server_name says otherwise.
//
// The files are read again when they change (watchedFiles), without a new
// transport: the client certificate is handed over per handshake
// (GetClientCertificate), and with a ca_file the server's chain is checked
// per handshake against the current pool (VerifyConnection), since
// tls.Config.RootCAs cannot change once the transport uses the config.
// That check is Go's own (x509.Certificate.Verify with the server-auth
// usage and the expected name), so InsecureSkipVerify only moves it.
func newTLSConfig(s *policy.TLSSettings, host string, env Env, what string) *tls.Config {
	if s == nil {
		return nil
	}
	cfg := &tls.Config{ServerName: s.ServerName, MinVersion: tls.VersionTLS12}
	if s.CertFile != "" {
		pair := newWatchedFiles([]string{s.CertFile, s.KeyFile}, func() (*tls.Certificate, error) {
			c, err := policy.ReadKeyPair(s.CertFile, s.KeyFile)
			return &c, err
		}, env, what+" client certificate")
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return pair.get()
		}
	}
	if s.CAFile != "" {
		roots := newWatchedFiles([]string{s.CAFile}, func() (*x509.CertPool, error) {
			return policy.ReadCAFile(s.CAFile)
		}, env, what+" ca_file")
		name := s.ServerName
		if name == "" {
			name = host
		}
		cfg.InsecureSkipVerify = true // checked in VerifyConnection, against the current roots
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyServer(cs, roots, name)
		}
	}
	return cfg
}

// verifyServer checks the server's chain against the current roots and
// its certificate against name, as crypto/tls does with RootCAs. A failure
// is a tls.CertificateVerificationError, which the call classifies as a
// trust failure (`tls`, not retryable): a configuration fault.
func verifyServer(cs tls.ConnectionState, roots *watchedFiles[*x509.CertPool], name string) error {
	pool, err := roots.get()
	if err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	if len(cs.PeerCertificates) == 0 {
		return &tls.CertificateVerificationError{Err: errors.New("the server sent no certificate")}
	}
	opts := x509.VerifyOptions{Roots: pool, DNSName: name, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

// Untrusted says err is a certificate the client does not trust (an
// unknown authority, another host name, an invalid certificate): a
// configuration fault, not the backend's.
func Untrusted(err error) bool {
	var (
		unknownAuth x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		verify      *tls.CertificateVerificationError
	)
	return errors.As(err, &unknownAuth) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verify)
}
