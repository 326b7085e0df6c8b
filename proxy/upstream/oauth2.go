package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/redact"
)

// tokenSource gets and caches an upstream's OAuth2 client-credentials
// token. It is oauth2's ReuseTokenSource with what a proxy needs besides:
//
//   - every token request is bounded by the deadline of the call that
//     needs it (an oauth2.TokenSource's Token takes no context, and the
//     clientcredentials source binds one context for its whole life);
//   - concurrent calls share one token request;
//   - a token is refreshed before it expires: once less than a fifth of
//     its lifetime, and at most refreshMargin, remains. Until it really
//     expires the current token still serves, so a token endpoint that
//     fails a refresh fails no call;
//   - after a failed token request, calls that have no valid token fail
//     at once for failureHoldDown instead of each sending its own, so a
//     token endpoint that is down is not flooded;
//   - a token the backend refuses (401) is dropped, so the next call gets
//     a new one rather than waiting for the old one to expire;
//   - expiry follows the injected clock, so tests move time.
//
// Errors are summarised (the endpoint's status and RFC 6749 error code):
// an oauth2 error's text carries the endpoint's raw answer, which may echo
// what the client sent.
type tokenSource struct {
	upstream string
	settings *policy.OAuth2Settings
	clientID func() (string, error)
	secret   func() (string, error)
	client   *http.Client
	now      func() time.Time
	log      *slog.Logger
	secrets  *redact.SecretSet // gets every access token issued

	mu      sync.Mutex
	tok     *cachedToken
	flight  *tokenFlight
	nextTry time.Time // no token request before, after a failure
	lastErr error
	conf    *clientcredentials.Config // for the current client id and secret
}

// cachedToken is a token ready to send.
type cachedToken struct {
	header    string // "Bearer …"
	refreshAt time.Time
	expiry    time.Time
}

// tokenFlight is a token request in progress; done closes when it ends.
type tokenFlight struct {
	done     chan struct{}
	tok      *cachedToken
	err      error
	canceled bool // the caller that made the request went away
}

const (
	// refreshMargin bounds how long before expiry a token is refreshed.
	refreshMargin = time.Minute
	// failureHoldDown is how long calls without a valid token fail at
	// once after a failed token request.
	failureHoldDown = time.Second
	// defaultTokenLifetime is the lifetime of a token whose answer had no
	// expires_in.
	defaultTokenLifetime = 5 * time.Minute
)

func newTokenSource(upstream string, s *policy.OAuth2Settings, env Env, secrets *redact.SecretSet) *tokenSource {
	what := "upstream " + upstream + " oauth2"
	var host string
	if u, err := url.Parse(s.TokenURL); err == nil {
		host = u.Hostname()
	}
	transport := &http.Transport{
		Proxy:                  nil, // as for the upstream itself
		DialContext:            (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:        newTLSConfig(s.TLS, host, env, what+" token endpoint"),
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           2,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    5 * time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	return &tokenSource{
		upstream: upstream,
		settings: s,
		clientID: secretSource(s.ClientID, policy.CheckHeaderSecret, env, what+" client_id_file", secrets),
		secret:   secretSource(s.ClientSecret, policy.CheckHeaderSecret, env, what+" client_secret_file", secrets),
		secrets:  secrets,
		client: &http.Client{
			Transport: transport,
			// A redirect would take the client's credentials elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		now: env.Now,
		log: env.Logger,
	}
}

// token returns a token to send, requesting one when there is none fresh.
func (s *tokenSource) token(ctx context.Context) (*cachedToken, error) {
	for {
		s.mu.Lock()
		now := s.now()
		valid := s.tok != nil && now.Before(s.tok.expiry)
		switch {
		case valid && now.Before(s.tok.refreshAt):
			tok := s.tok
			s.mu.Unlock()
			return tok, nil
		case now.Before(s.nextTry) || s.flight != nil && valid:
			// Refreshing failed a moment ago, or is under way: the current
			// token serves while it is valid.
			tok, err := s.tok, s.lastErr
			s.mu.Unlock()
			if valid {
				return tok, nil
			}
			return nil, err
		case s.flight == nil:
			f := &tokenFlight{done: make(chan struct{})}
			s.flight = f
			s.mu.Unlock()
			s.fetch(ctx, f, now)
			if f.err != nil && valid {
				return s.current()
			}
			return f.tok, f.err
		}
		f := s.flight
		s.mu.Unlock()
		select {
		case <-f.done:
			if f.err == nil {
				return f.tok, nil
			}
			if f.canceled && ctx.Err() == nil {
				continue // its caller went away; this one asks
			}
			return nil, f.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// current returns the cached token, or the last error.
func (s *tokenSource) current() (*cachedToken, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok != nil && s.now().Before(s.tok.expiry) {
		return s.tok, nil
	}
	return nil, s.lastErr
}

// fetch runs one token request for flight f and publishes its result.
func (s *tokenSource) fetch(ctx context.Context, f *tokenFlight, start time.Time) {
	tok, err := s.request(ctx, start)
	s.mu.Lock()
	s.flight = nil
	switch {
	case err == nil:
		s.tok, s.nextTry, s.lastErr = tok, time.Time{}, nil
	case errors.Is(ctx.Err(), context.Canceled):
		// Nothing is wrong with the endpoint: the caller went away.
		f.canceled = true
	default:
		s.nextTry, s.lastErr = s.now().Add(failureHoldDown), err
	}
	f.tok, f.err = tok, err
	s.mu.Unlock()
	close(f.done)
	if err != nil && !f.canceled {
		s.log.Warn("upstream token request failed", "upstream", s.upstream, "err", err.Error())
	}
}

// request asks the token endpoint for a token, within ctx.
func (s *tokenSource) request(ctx context.Context, start time.Time) (*cachedToken, error) {
	conf, err := s.config()
	if err != nil {
		return nil, err
	}
	tok, err := conf.Token(context.WithValue(ctx, oauth2.HTTPClient, s.client))
	if err != nil {
		return nil, tokenError(err)
	}
	header := tok.Type() + " " + tok.AccessToken
	if tok.AccessToken == "" || policy.CheckHeaderSecret(header) != nil {
		return nil, credentialError("the token endpoint answered a token that cannot be sent in a header")
	}
	// Known before any call sends it.
	s.secrets.Add(tok.AccessToken)
	lifetime := defaultTokenLifetime
	if !tok.Expiry.IsZero() {
		// oauth2 sets Expiry from expires_in by the wall clock; the
		// lifetime is carried over to this source's clock.
		lifetime = time.Until(tok.Expiry)
	}
	t := &cachedToken{header: header, expiry: start.Add(lifetime)}
	t.refreshAt = t.expiry.Add(-min(max(lifetime, 0)/5, refreshMargin))
	return t, nil
}

// config returns the clientcredentials config for the current client id
// and secret, made again when a file holding one of them changed.
func (s *tokenSource) config() (*clientcredentials.Config, error) {
	id, err := s.clientID()
	if err != nil {
		return nil, err
	}
	secret, err := s.secret()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conf != nil && s.conf.ClientID == id && s.conf.ClientSecret == secret {
		return s.conf, nil
	}
	params := url.Values{}
	for k, v := range s.settings.Params {
		params.Set(k, v)
	}
	s.conf = &clientcredentials.Config{
		ClientID:       id,
		ClientSecret:   secret,
		TokenURL:       s.settings.TokenURL,
		Scopes:         s.settings.Scopes,
		EndpointParams: params,
		AuthStyle:      authStyle(s.settings.AuthStyle),
	}
	return s.conf, nil
}

func authStyle(s string) oauth2.AuthStyle {
	switch s {
	case policy.OAuth2AuthHeader:
		return oauth2.AuthStyleInHeader
	case policy.OAuth2AuthParams:
		return oauth2.AuthStyleInParams
	}
	return oauth2.AuthStyleAutoDetect
}

// rejected drops tok if it is still the cached token: the backend refused
// it, so the next call asks for a new one.
func (s *tokenSource) rejected(tok *cachedToken) {
	s.mu.Lock()
	if s.tok == tok {
		s.tok = nil
	}
	s.mu.Unlock()
}

// closeIdle closes the token endpoint's idle connections.
func (s *tokenSource) closeIdle() { s.client.CloseIdleConnections() }

// tokenError summarises a token request's failure without the endpoint's
// answer: its status and RFC 6749 error code, or the transport's error.
func tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		msg := "the token endpoint refused the request"
		if re.Response != nil {
			msg = fmt.Sprintf("the token endpoint answered %d", re.Response.StatusCode)
		}
		if code := printableWord(re.ErrorCode); code != "" {
			msg += " (" + code + ")"
		}
		return credentialError(msg)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return credentialError("the token request timed out")
		}
		return credentialError("the token request failed: " + ue.Err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return credentialError("the token request timed out")
	}
	// oauth2's own complaints about the answer ("server response missing
	// access_token"); parse errors are not passed on, they may quote it.
	if msg := err.Error(); strings.HasPrefix(msg, "oauth2: server response missing") {
		return credentialError("the token endpoint's answer has no access_token")
	}
	return credentialError("the token endpoint's answer could not be read")
}

// printableWord keeps an error code if it is one short printable word
// (RFC 6749 error codes are), else "".
func printableWord(s string) string {
	if len(s) > 64 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return ""
		}
	}
	return s
}
