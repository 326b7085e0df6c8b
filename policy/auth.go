package policy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"

	"github.com/toolgate/toolgate/internal/boundedio"
)

// AuthKind names how toolgate proves itself to an upstream.
type AuthKind string

// The kinds of upstream authentication.
const (
	AuthBasic  AuthKind = "basic"   // Authorization: Basic base64(username:password)
	AuthBearer AuthKind = "bearer"  // Authorization: Bearer token
	AuthAPIKey AuthKind = "api_key" // a key in a named header or query parameter
	AuthOAuth2 AuthKind = "oauth2"  // an OAuth2 client-credentials token, fetched and refreshed
)

// Secret is a credential: a value written in the policy (through ${VAR},
// usually), or a file that is read when the policy loads and again
// whenever it changes (a mounted Kubernetes Secret). Formatting a Secret,
// with fmt, slog or encoding/json, never shows its value.
type Secret struct {
	Value string
	// File is the absolute path of the file holding the value; Value is
	// empty when it is set.
	File string
}

// String shows where the secret comes from, never its value.
func (s Secret) String() string {
	if s.File != "" {
		return "file:" + s.File
	}
	return "[redacted]"
}

// GoString is String, for %#v.
func (s Secret) GoString() string { return s.String() }

// LogValue is String, for slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON is String, for encoding/json.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }

// UpstreamAuth is upstreams.<name>.auth: the credential toolgate adds to
// every request it sends to the upstream (tool calls, passthrough routes,
// and the requests Envoy sends under toolgate extproc).
type UpstreamAuth struct {
	Kind AuthKind
	// Username and Password are the basic credentials.
	Username, Password Secret
	// Token is the bearer token, or the API key.
	Token Secret
	// Header is the header the credential goes in: Authorization for
	// basic, bearer and oauth2, the named header for an API key; empty
	// when the key goes in the query.
	Header string
	// Scheme precedes the credential in the header ("Basic", "Bearer", an
	// API key's scheme); empty for none. An OAuth2 token's own type is
	// used instead.
	Scheme string
	// Query is the query parameter an API key goes in; empty for a header.
	Query string
	// Cookie is the cookie an API key goes in (Header is then Cookie, and
	// the header's value NAME=key); empty for none.
	Cookie string
	OAuth2 *OAuth2Settings
}

// Equal reports whether two auth settings are the same (nil is none).
func (a *UpstreamAuth) Equal(b *UpstreamAuth) bool { return reflect.DeepEqual(a, b) }

// OAuth2Settings is auth.oauth2: the client-credentials grant (RFC 6749
// section 4.4).
type OAuth2Settings struct {
	TokenURL     string
	ClientID     Secret
	ClientSecret Secret
	Scopes       []string
	// Params are more form parameters of the token request (audience,
	// resource).
	Params map[string]string
	// AuthStyle is how the client authenticates to the token endpoint:
	// OAuth2AuthHeader, OAuth2AuthParams, or empty to try the header first.
	AuthStyle string
	// TLS is the token endpoint's TLS settings; nil for the system's roots.
	TLS *TLSSettings
}

// The values of OAuth2Settings.AuthStyle.
const (
	OAuth2AuthHeader = "header" // HTTP basic authentication (client_secret_basic)
	OAuth2AuthParams = "params" // client_id and client_secret in the form (client_secret_post)
)

// TLSSettings is an upstream's (or a token endpoint's) tls block. Every
// file is read when the policy loads, and again when it changes.
type TLSSettings struct {
	// CAFile holds the PEM certificates the server's chain must end at,
	// instead of the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate (its chain, PEM) and
	// its private key, for servers that require one (mutual TLS).
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry, and the
	// one sent in SNI; empty for the URL's host.
	ServerName string
}

// Equal reports whether two TLS settings are the same (nil is none).
func (t *TLSSettings) Equal(o *TLSSettings) bool {
	if t == nil || o == nil {
		return t == o
	}
	return *t == *o
}

// maxSecretBytes bounds a secret file; maxPEMBytes a certificate or key
// file. A wrong path (a log file) fails fast instead of being sent.
const (
	maxSecretBytes = 64 << 10
	maxPEMBytes    = 1 << 20
)

// ReadSecretFile reads a secret file: its content without the whitespace
// around it (the newline an editor or `echo` leaves). An empty file is an
// error. An error never repeats the file's content.
func ReadSecretFile(path string) (string, error) {
	b, err := boundedio.ReadFile(path, maxSecretBytes)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", errors.New("the file is empty")
	}
	return s, nil
}

// CheckHeaderSecret says why a secret cannot be sent in a header: it is
// empty, or holds a control character (a CR or LF would end the header
// line). The error never repeats the value.
func CheckHeaderSecret(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return errors.New("holds a control character (CR, LF, NUL…), which cannot be sent in a header")
		}
	}
	return nil
}

// CheckPassword says why a basic-auth password cannot be used: it may be
// empty, but a control character (a NUL, a line break) is a mistake.
func CheckPassword(s string) error {
	if s == "" {
		return nil
	}
	return CheckHeaderSecret(s)
}

// CheckUsername says why a basic-auth username cannot be used: a colon
// would end it early (RFC 7617), a control character cannot be sent.
func CheckUsername(s string) error {
	if strings.Contains(s, ":") {
		return errors.New("must not contain a colon (RFC 7617)")
	}
	return CheckHeaderSecret(s)
}

// ReadCAFile reads a PEM file of CA certificates into a pool. A file
// without a certificate is an error.
func ReadCAFile(path string) (*x509.CertPool, error) {
	b, err := boundedio.ReadFile(path, maxPEMBytes)
	if err != nil {
		return nil, err
	}
	return ParseCAPEM(b)
}

// ParseCAPEM parses PEM CA certificates into a pool.
func ParseCAPEM(b []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for len(b) > 0 {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate in the file")
	}
	return pool, nil
}

// ReadKeyPair reads a client certificate and its private key (PEM).
func ReadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := boundedio.ReadFile(certFile, maxPEMBytes)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := boundedio.ReadFile(keyFile, maxPEMBytes)
	if err != nil {
		return tls.Certificate{}, err
	}
	return ParseKeyPair(cert, key)
}

// ParseKeyPair parses a PEM certificate chain and its private key. The
// error never repeats the key.
func ParseKeyPair(cert, key []byte) (tls.Certificate, error) {
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		// crypto/tls's messages name the problem, never the bytes.
		return tls.Certificate{}, err
	}
	return pair, nil
}
