package config

import (
	"strings"
	"testing"
)

const openCredentialBase = `version: 1
upstreams:
  twilio:
    url: http://127.0.0.1:7001
    auth:
      basic: {username: AC1, password: secret}
  crm:
    url: http://127.0.0.1:7002
    forward_headers: [Authorization]
tools:
  send_sms:
    description: Send a text message.
    upstream: twilio
    args: {type: object}
    request: {method: POST, path: /sms}
  contacts:
    description: The caller's contacts.
    upstream: crm
    args: {type: object}
    request: {method: GET, path: /contacts}
`

// TestCredentialsServeUnidentifiedCallersOnlyWhenThePolicySaysSo: a
// policy that lets callers toolgate cannot identify use a credential it
// holds loads only when access.shared_credentials lists the upstream, or
// when no such caller can reach the tool (access.default: deny with the
// callers listed). A backend that authenticates each caller through
// forward_headers holds no credential of toolgate's.
func TestCredentialsServeUnidentifiedCallersOnlyWhenThePolicySaysSo(t *testing.T) {
	for _, c := range []struct {
		name, access, want string
	}{
		{"no access section: refused", "", "upstreams.twilio.auth: callers toolgate cannot identify use this credential: access.default is allow (the default)"},
		{"access.default allow: refused", "access: {default: allow}\n", "access.shared_credentials: [twilio] if anyone who reaches toolgate may use it"},
		{"callers listed but the default allows the rest: refused", "access: {callers: {ops: {tools: ['*']}}}\n", "any caller may call send_sms"},
		{"shared_credentials says so: loads", "access: {default: allow, shared_credentials: [twilio]}\n", ""},
		{"only identified callers: loads", "access: {default: deny, callers: {ops: {tools: [send_sms, contacts]}}}\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := CompileSource("p.yaml", []byte(openCredentialBase+c.access), Options{LookupEnv: noEnv})
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("err = %v, want %q", err, c.want)
			case c.want != "" && strings.Contains(err.Error(), "crm"):
				t.Errorf("the forwarding upstream is refused too: %v", err)
			}
		})
	}
	t.Run("an upstream listed without a credential is a warning", func(t *testing.T) {
		var warns []string
		_, err := CompileSource("p.yaml", []byte(openCredentialBase+"access: {shared_credentials: [twilio, crm]}\n"),
			Options{LookupEnv: noEnv, Warn: func(e *Error) { warns = append(warns, e.Error()) }})
		if err != nil || len(warns) != 1 || !strings.Contains(warns[0], "access.shared_credentials[1]: upstream crm has no credential toolgate sends") {
			t.Errorf("err %v, warnings %q", err, warns)
		}
	})
}

func TestCredentialNames(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "Cookie": true, "X-Api-Key": true, "apikey": true, "key": true, "access_token": true,
		"X-Auth-Token": true, "client_secret": true, "X-Goog-Api-Key": true, "password": true, "X-Signature": true,
		"X-Tenant": false, "Accept": false, "q": false, "wt": false, "X-Request-Source": false, "limit": false,
	} {
		if got := credentialName(name); got != want {
			t.Errorf("credentialName(%q) = %v, want %v", name, got, want)
		}
	}
}
