// Package zoo_test runs examples/zoo.yaml, as toolgate serves it, against
// fakes of the APIs it fronts (Elasticsearch, Solr, Twilio, SendGrid,
// Slack, FCM with its OAuth2 token endpoint, a plain-text SMS gateway),
// written from each API's public documentation: every fake asserts the
// exact request it receives, and every answer each API documents is mapped
// to its envelope in one table (TestZoo).
package zoo_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/coretest"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/proxy"
)

const (
	policyFile = "../zoo.yaml"
	envFile    = "../zoo.env"
)

// readEnv reads examples/zoo.env: NAME=value lines, # comments.
func readEnv(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(envFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.ContainsAny(v, " \t") {
			t.Fatalf("%s: %q is not NAME=value", envFile, line)
		}
		env[k] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return env
}

// answers sets the answer of an exchange: status, Content-Type (none when
// empty), body and more headers.
func (x exchange) answers(status int, ctype, body string, kv ...string) exchange {
	x.give = answer{status: status, header: map[string]string{}, body: body}
	if ctype != "" {
		x.give.header["Content-Type"] = ctype
	}
	for i := 0; i < len(kv); i += 2 {
		x.give.header[kv[i]] = kv[i+1]
	}
	return x
}

// want is the envelope a call must end with: its status, retryable,
// side_effect, retry_after_ms, parts its message must hold and parts it
// must not (a long error detail is cut), and its data (compact JSON,
// checked when not empty), and how many answers broke response.schema.
type want struct {
	status       contracts.Status
	retryable    bool
	sideEffect   contracts.SideEffect
	retryAfterMS int64
	message      []string
	absent       []string
	data         string
	violations   int // answers response.schema refused
}

type zooCase struct {
	name  string
	tool  string
	args  string
	calls []exchange        // in order; none when nothing may be sent
	env   map[string]string // variables that differ from zoo.env for this call
	want  want
}

const (
	none    = contracts.SideEffectNone
	done    = contracts.SideEffectDone
	unknown = contracts.SideEffectUnknown
)

// said is how a message quotes the backend's error detail
// (response.error_detail).
func said(detail string) string { return `The backend said: "` + detail + `"` }

func zooCases(z *zoo) []zooCase {
	const (
		esArgs       = `{"q":"quantum computing","limit":2}`
		esBody       = `{"query":{"match":{"title":"quantum computing"}},"size":2}`
		solrArgs     = `{"q":"name:ipod","filters":["inStock:true","cat:electronics"],"rows":5}`
		solrQuery    = "q=name%3Aipod&fq=inStock%3Atrue&fq=cat%3Aelectronics&rows=5&wt=json"
		twilioArgs   = `{"to":"+15558675310","text":"Your order has shipped","idempotency_key":"K"}`
		twilioBody   = "To=%2B15558675310&From=%2B15017122661&Body=Your+order+has+shipped"
		sendgridArgs = `{"to":["ada@example.com","alan@example.com"],"subject":"Build green","text":"All tests pass.","idempotency_key":"K"}`
		sendgridBody = `{"personalizations":[{"to":[{"email":"ada@example.com"},{"email":"alan@example.com"}]}],` +
			`"from":{"email":"noreply@example.com"},"subject":"Build green","content":[{"type":"text/plain","value":"All tests pass."}]}`
		slackArgs = `{"channel":"C024BE91L","text":"Deploy finished","idempotency_key":"K"}`
		slackBody = `{"channel":"C024BE91L","text":"Deploy finished"}`
		fcmArgs   = `{"device_token":"bk3RNwTe3H0:CI2k_HHwgIpoDKCIZvvDMExUdFQ3P1","title":"Build green","body":"All tests pass.","idempotency_key":"K"}`
		fcmBody   = `{"message":{"token":"bk3RNwTe3H0:CI2k_HHwgIpoDKCIZvvDMExUdFQ3P1","notification":{"title":"Build green","body":"All tests pass."}}}`
		smsArgs   = `{"to":"4915112345678","text":"Your code is 1234","idempotency_key":"K"}`
		smsBody   = "to=4915112345678&text=Your+code+is+1234"
		text      = "text/plain; charset=utf-8"
		html      = "text/html;charset=utf-8"
	)
	es := func(status int, body string, kv ...string) []exchange {
		return []exchange{z.esSearch(esBody).answers(status, jsonType, body, kv...)}
	}
	solr := func(status int, ctype, body string) []exchange {
		return []exchange{z.solrSelect(solrQuery).answers(status, ctype, body)}
	}
	twilio := func(status int, body string, kv ...string) []exchange {
		return []exchange{z.twilioCreate(twilioBody).answers(status, jsonType, body, kv...)}
	}
	sendgrid := func(status int, ctype, body string, kv ...string) []exchange {
		return []exchange{z.sendgridSend(sendgridBody).answers(status, ctype, body, kv...)}
	}
	slack := func(status int, body string, kv ...string) []exchange {
		return []exchange{z.slackPost(slackBody).answers(status, "application/json; charset=utf-8", body, kv...)}
	}
	fcm := func(status int, body string, kv ...string) []exchange {
		return []exchange{z.fcmToken(), z.fcmSend(fcmBody).answers(status, "application/json; charset=UTF-8", body, kv...)}
	}
	sms := func(status int, body string) []exchange {
		return []exchange{z.smsSend(smsBody).answers(status, text, body)}
	}
	return []zooCase{
		// Elasticsearch: read-only; the default table decides every status.
		{"es hits", "search_articles", esArgs, es(200, esHits),
			nil, want{status: contracts.StatusOK, sideEffect: none,
				data: `{"articles":[{"title":"Quantum computing for beginners","url":"https://example.com/a/1"},{"title":"Quantum computing, ten years on","url":"https://example.com/a/7"}],"total":2}`}},
		{"es no hits", "search_articles", esArgs, es(200, esNoHits),
			nil, want{status: contracts.StatusEmpty, sideEffect: none, data: `{"articles":[],"total":0}`}},
		{"es 400 root_cause", "search_articles", esArgs, es(400, esBadQuery),
			nil, want{status: contracts.StatusBadArgs, sideEffect: none,
				message: []string{said("failed to create query: Can only use fuzzy queries on keyword and text fields - not on [title] which is of type [integer]")}}},
		{"es 404 index_not_found_exception", "search_articles", esArgs, es(404, esNoIndex),
			nil, want{status: contracts.StatusNotFound, sideEffect: none, message: []string{said("no such index [articles]")}}},
		{"es 401 security_exception", "search_articles", esArgs, es(401, esUnauthenticated, "WWW-Authenticate", `ApiKey`),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{said("unable to authenticate with provided credentials and anonymous access is not allowed for this request")}}},
		{"es 403 security_exception", "search_articles", esArgs, es(403, esUnauthorized),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{said("action [indices:data/read/search] is unauthorized for API key id [VuaCfGcBCdbkQm-e5aOx] of user [toolgate] on indices [articles]")}}},
		{"es 429 es_rejected_execution_exception", "search_articles", esArgs, es(429, esRejected),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, message: []string{said("rejected execution of TimedRunnable on EsThreadPoolExecutor[name = node-1/search, queue capacity = 1000]")}}},
		{"es 503 all shards failed (empty root_cause)", "search_articles", esArgs, es(503, esAllShardsFailed),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, message: []string{"(HTTP 503)", said("all shards failed")}}},
		{"es 200 with hits.total a number (rest_total_hits_as_int)", "search_articles", esArgs, es(200, esTotalAsInt),
			nil, want{status: contracts.StatusUpstream, sideEffect: none, violations: 1, message: []string{"could not be read"}}},
		{"es 500 (null reason)", "search_articles", esArgs, es(500, esInternal),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, message: []string{"(HTTP 500)"}, absent: []string{"The backend said"}}},

		// Solr: read-only; repeated fq and the constant wt=json in the query.
		{"solr docs", "search_products", solrArgs, solr(200, jsonType, solrDocs),
			nil, want{status: contracts.StatusOK, sideEffect: none,
				data: `{"products":[{"id":"MA147LL/A","name":"Apple 60 GB iPod with Video Playback Black","price":399.0,"inStock":true}],"found":1}`}},
		{"solr no docs", "search_products", `{"q":"name:zune"}`,
			[]exchange{z.solrSelect("q=name%3Azune&rows=10&wt=json").answers(200, jsonType, solrNoDocs)},
			nil, want{status: contracts.StatusEmpty, sideEffect: none, data: `{"products":[],"found":0}`}},
		{"solr 400 SyntaxError", "search_products", `{"q":"name:(ipod"}`,
			[]exchange{z.solrSelect("q=name%3A%28ipod&rows=10&wt=json").answers(400, jsonType, solrSyntaxError)},
			nil, want{status: contracts.StatusBadArgs, sideEffect: none,
				message: []string{said(`org.apache.solr.search.SyntaxError: Cannot parse 'name:(ipod': Encountered "<EOF>" at line 1, column 10.`)}}},
		{"solr 401 html", "search_products", solrArgs, solr(401, html, solr401),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{"(HTTP 401)"}, absent: []string{"The backend said", "<html>"}}},
		{"solr 404 html", "search_products", solrArgs, solr(404, html, solr404),
			nil, want{status: contracts.StatusNotFound, sideEffect: none, message: []string{"(HTTP 404)"}, absent: []string{"The backend said", "<html>"}}},
		{"solr 503", "search_products", solrArgs, solr(503, jsonType, solrNoServers),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, message: []string{said("no servers hosting shard: shard1")}}},

		// Twilio: side-effecting, form body, basic auth.
		{"twilio 201 queued", "send_sms", twilioArgs, twilio(201, twilioQueued),
			nil, want{status: contracts.StatusOK, sideEffect: done, data: `{"sid":"SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","status":"queued"}`}},
		{"twilio 400 21211 invalid To", "send_sms", twilioArgs, twilio(400, twilioInvalidTo),
			nil, want{status: contracts.StatusBadArgs, sideEffect: none, message: []string{said("The 'To' number +15558675310 is not a valid phone number.")}}},
		{"twilio 400 21610 unsubscribed", "send_sms", twilioArgs, twilio(400, twilioUnsubscribed),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{said("Attempt to send to unsubscribed recipient")}}},
		{"twilio 401 20003", "send_sms", twilioArgs, twilio(401, twilioAuthError, "WWW-Authenticate", `Basic realm="Twilio API"`),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{said("Authentication Error - invalid username")}}},
		{"twilio 404 20404", "send_sms", twilioArgs, twilio(404, twilioNotFound),
			nil, want{status: contracts.StatusNotFound, sideEffect: none, message: []string{"(HTTP 404)"}}},
		{"twilio 429 20429", "send_sms", twilioArgs, twilio(429, twilioTooMany),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, message: []string{said("Too Many Requests")}}},
		{"twilio 500", "send_sms", twilioArgs, twilio(500, twilioInternal),
			nil, want{status: contracts.StatusUpstream, sideEffect: unknown, message: []string{said("Internal Server Error")}}},
		{"twilio 503", "send_sms", twilioArgs, twilio(503, twilioUnavailable),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, message: []string{said("Service Unavailable")}}},

		// SendGrid: side-effecting; 202 with an empty body is done.
		{"sendgrid 202 empty body", "send_email", sendgridArgs, sendgrid(202, "", "", "X-Message-Id", "W0A0ba8TQXGn3Ltwe3yNWQ"),
			nil, want{status: contracts.StatusOK, sideEffect: done}},
		{"sendgrid 400 errors[]", "send_email", sendgridArgs, sendgrid(400, jsonType, sendgridBadFrom),
			nil, want{status: contracts.StatusBadArgs, sideEffect: none, message: []string{said("The from email does not contain a valid address.")}}},
		{"sendgrid 401", "send_email", sendgridArgs, sendgrid(401, jsonType, sendgridUnauthorized),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{said("The provided authorization grant is invalid, expired, or revoked")}}},
		{"sendgrid 403 sender identity", "send_email", sendgridArgs, sendgrid(403, jsonType, sendgridForbidden),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{`The backend said: "The from address does not match a verified Sender Identity. Mail cannot be sent until this error is resolved.`},
				absent: []string{"Sender Identity requirements"}}},
		{"sendgrid 413", "send_email", sendgridArgs, sendgrid(413, jsonType, sendgridTooLarge),
			nil, want{status: contracts.StatusBadArgs, sideEffect: none, message: []string{said("The JSON payload you have included in your request is too large.")}}},
		{"sendgrid 429", "send_email", sendgridArgs, sendgrid(429, jsonType, sendgridTooMany, "X-RateLimit-Limit", "600", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1700000000"),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, message: []string{said("too many requests")}}},
		{"sendgrid 500", "send_email", sendgridArgs, sendgrid(500, jsonType, sendgridInternal),
			nil, want{status: contracts.StatusUpstream, sideEffect: unknown, message: []string{said("An internal server error occurred.")}}},

		// Slack: errors come as HTTP 200 {"ok": false, "error": …}.
		{"slack ok", "post_message", slackArgs, slack(200, slackPosted),
			nil, want{status: contracts.StatusOK, sideEffect: done, data: `{"channel":"C024BE91L","ts":"1503435956.000247"}`}},
		{"slack channel_not_found", "post_message", slackArgs, slack(200, slackError("channel_not_found")),
			nil, want{status: contracts.StatusNotFound, sideEffect: none, message: []string{said("channel_not_found")}}},
		{"slack not_in_channel", "post_message", slackArgs, slack(200, slackError("not_in_channel")),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{said("not_in_channel")}}},
		{"slack invalid_auth", "post_message", slackArgs, slack(200, slackError("invalid_auth")),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{said("invalid_auth")}}},
		{"slack msg_too_long", "post_message", slackArgs, slack(200, slackError("msg_too_long")),
			nil, want{status: contracts.StatusBadArgs, sideEffect: none, message: []string{said("msg_too_long")}}},
		{"slack service_unavailable", "post_message", slackArgs, slack(200, slackError("service_unavailable")),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, message: []string{said("service_unavailable")}}},
		{"slack fatal_error", "post_message", slackArgs, slack(200, slackError("fatal_error")),
			nil, want{status: contracts.StatusUpstream, sideEffect: unknown, message: []string{said("fatal_error")}}},
		{"slack 429 ratelimited Retry-After", "post_message", slackArgs, slack(429, slackError("ratelimited"), "Retry-After", "30"),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, retryAfterMS: 30000, message: []string{said("ratelimited")}}},

		// FCM: every call first gets a token from the token endpoint.
		{"fcm 200", "push_notification", fcmArgs, fcm(200, `{"name":"projects/zoo-project/messages/0:1500415314455276%31bd1c9631bd1c96"}`),
			nil, want{status: contracts.StatusOK, sideEffect: done, data: `{"name":"projects/zoo-project/messages/0:1500415314455276%31bd1c9631bd1c96"}`}},
		{"fcm 400 INVALID_ARGUMENT", "push_notification", fcmArgs, fcm(400, fcmError(400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token", "INVALID_ARGUMENT")),
			nil, want{status: contracts.StatusBadArgs, sideEffect: none, message: []string{said("INVALID_ARGUMENT: The registration token is not a valid FCM registration token")}}},
		{"fcm 401 THIRD_PARTY_AUTH_ERROR", "push_notification", fcmArgs, fcm(401, fcmError(401, "UNAUTHENTICATED", "Auth error from APNS or Web Push Service", "THIRD_PARTY_AUTH_ERROR")),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{said("THIRD_PARTY_AUTH_ERROR: Auth error from APNS or Web Push Service")}}},
		{"fcm 403 SENDER_ID_MISMATCH", "push_notification", fcmArgs, fcm(403, fcmError(403, "PERMISSION_DENIED", "SenderId mismatch", "SENDER_ID_MISMATCH")),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{said("SENDER_ID_MISMATCH: SenderId mismatch")}}},
		{"fcm 404 UNREGISTERED", "push_notification", fcmArgs, fcm(404, fcmError(404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED")),
			nil, want{status: contracts.StatusNotFound, sideEffect: none, message: []string{"This device token is no longer registered for notifications"}}},
		{"fcm 429 QUOTA_EXCEEDED", "push_notification", fcmArgs, fcm(429, fcmError(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Send messages'", "QUOTA_EXCEEDED"), "Retry-After", "60"),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, retryAfterMS: 60000, message: []string{said("QUOTA_EXCEEDED: Quota exceeded for quota metric 'Send messages'")}}},
		{"fcm 500 INTERNAL", "push_notification", fcmArgs, fcm(500, fcmError(500, "INTERNAL", "Internal error encountered.", "INTERNAL")),
			nil, want{status: contracts.StatusUpstream, sideEffect: unknown, message: []string{said("INTERNAL: Internal error encountered.")}}},
		{"fcm 503 UNAVAILABLE", "push_notification", fcmArgs, fcm(503, fcmError(503, "UNAVAILABLE", "The service is currently unavailable.", "UNAVAILABLE"), "Retry-After", "10"),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, retryAfterMS: 10000, message: []string{said("UNAVAILABLE: The service is currently unavailable.")}}},
		{"fcm token endpoint down", "push_notification", fcmArgs, nil,
			map[string]string{"FCM_TOKEN_URL": "down"},
			want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, retryAfterMS: 1000, message: []string{"nothing was sent"}}},
		{"fcm token endpoint refuses the client", "push_notification", fcmArgs,
			[]exchange{z.fcmToken().answers(401, jsonType, `{"error":"invalid_client","error_description":"client authentication failed"}`)},
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, retryAfterMS: 1000, message: []string{"nothing was sent"}}},

		// The text gateway: HTTP 200 for everything it understood.
		{"sms OK: queued", "send_text", smsArgs, sms(200, "OK: queued\n"),
			nil, want{status: contracts.StatusOK, sideEffect: done, data: `"OK: queued"`}},
		{"sms ERR: reason", "send_text", smsArgs, sms(200, "ERR: invalid destination number\n"),
			nil, want{status: contracts.StatusBadArgs, sideEffect: none, message: []string{said("ERR: invalid destination number")}}},
		{"sms 401", "send_text", smsArgs, sms(401, "ERR: invalid api key\n"),
			nil, want{status: contracts.StatusForbidden, sideEffect: none, message: []string{said("ERR: invalid api key")}}},
		{"sms 503", "send_text", smsArgs, sms(503, "ERR: try again later\n"),
			nil, want{status: contracts.StatusUpstream, retryable: true, sideEffect: none, message: []string{said("ERR: try again later")}}},
		{"sms 500", "send_text", smsArgs, sms(500, "ERR: internal error\n"),
			nil, want{status: contracts.StatusUpstream, sideEffect: unknown, message: []string{said("ERR: internal error")}}},
	}
}

// TestZoo calls every zoo tool through toolgate's agent port, as a server
// started from examples/zoo.yaml serves it, once per documented answer of
// its API, and checks both the request the fake received and the
// envelope the agent got.
func TestZoo(t *testing.T) {
	env := readEnv(t)
	z := startZoo(t, env)
	for k, v := range env {
		t.Setenv(k, v)
	}
	secrets := secretValues(env)
	refused := proxytest.RefusedURL(t)
	client := &http.Client{}
	t.Cleanup(client.CloseIdleConnections)
	for _, tc := range zooCases(z) {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				if v == "down" {
					v = refused
				}
				t.Setenv(k, v)
			}
			// A fresh server per call: no breaker, token or idempotency
			// record carries over from another row.
			snap, err := config.Load(policyFile, config.Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv, core := coretest.Serve(t, snap, proxy.Options{})
			for _, x := range tc.calls {
				x.fake.expect(x)
			}
			_, env, err := proxytest.PostCall(client, srv.URL, tc.tool, tc.args, map[string]string{
				"X-Toolgate-Caller": "zoo-agent",
				"Authorization":     "Bearer agent-token",
				"Cookie":            "session=agent",
			})
			for _, f := range z.fakes() {
				for _, p := range f.finish() {
					t.Error(p)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			checkEnvelope(t, env, tc.want)
			if n := testutil.ToFloat64(core.Metrics().ContractViolations.WithLabelValues(tc.tool, proxy.ViolationResponse)); n != float64(tc.want.violations) {
				t.Errorf("%v answers broke response.schema, want %d", n, tc.want.violations)
			}
			raw, err := json.Marshal(env)
			if err != nil {
				t.Fatal(err)
			}
			for _, secret := range secrets {
				if strings.Contains(string(raw), secret) {
					t.Errorf("the envelope holds the secret %q: %s", secret, raw)
				}
			}
		})
	}
}

// secretValues are the values of zoo.env's credentials (the variables
// named *_KEY, *_TOKEN, *_SECRET, *_PASSWORD), and the access token FCM's
// token endpoint hands out.
func secretValues(env map[string]string) []string {
	out := []string{fcmAccessToken}
	for k, v := range env {
		for _, suffix := range []string{"_KEY", "_TOKEN", "_SECRET", "_PASSWORD"} {
			if strings.HasSuffix(k, suffix) {
				out = append(out, v)
			}
		}
	}
	return out
}

// TestZooEnvNamesEveryVariable keeps make check honest: zoo.env sets
// exactly the variables zoo.yaml reads.
func TestZooEnvNamesEveryVariable(t *testing.T) {
	doc, err := os.ReadFile(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	ref := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, m := range ref.FindAllStringSubmatch(line, -1) {
			used[m[1]] = true
		}
	}
	env := readEnv(t)
	for name := range used {
		if _, ok := env[name]; !ok {
			t.Errorf("%s uses ${%s}, which %s does not set", policyFile, name, envFile)
		}
	}
	for name := range env {
		if !used[name] {
			t.Errorf("%s sets %s, which %s does not use", envFile, name, policyFile)
		}
	}
}

func checkEnvelope(t *testing.T, env *contracts.Envelope, w want) {
	t.Helper()
	if env.Status != w.status || env.Retryable != w.retryable || env.SideEffect != w.sideEffect || env.RetryAfterMS != w.retryAfterMS {
		t.Errorf("envelope status %s, retryable %v, side_effect %s, retry_after_ms %d; want %s, %v, %s, %d\nmessage: %s",
			env.Status, env.Retryable, env.SideEffect, env.RetryAfterMS, w.status, w.retryable, w.sideEffect, w.retryAfterMS, env.Message)
	}
	for _, part := range w.message {
		if !strings.Contains(env.Message, part) {
			t.Errorf("message %q\nlacks %q", env.Message, part)
		}
	}
	for _, part := range w.absent {
		if strings.Contains(env.Message, part) {
			t.Errorf("message %q\nholds %q", env.Message, part)
		}
	}
	if w.data != "" {
		if !json.Valid([]byte(w.data)) {
			t.Fatalf("want data %s is not JSON", w.data)
		}
		if string(env.Data) != w.data {
			t.Errorf("data\n got %s\nwant %s", env.Data, w.data)
		}
	}
}
