package zoo_test

import (
	"encoding/base64"
	"net/url"
	"strconv"
	"testing"
)

// The zoo's APIs: for each, the exact request the documentation says a
// client sends for the zoo's calls, and the answers it documents. Every
// request also must not carry the agent's own headers (the caller name,
// the agent's Authorization) nor the idempotency key, which none of these
// APIs reads.

// zoo holds the fakes and the values of examples/zoo.env they check.
type zoo struct {
	env                                         map[string]string
	es, solr, twilio, sendgrid, slack, fcm, sms *fake
	token                                       *fake
}

func startZoo(t *testing.T, env map[string]string) *zoo {
	z := &zoo{env: env}
	for _, f := range []struct {
		f    **fake
		name string
		url  string // the variable, and the path prefix the upstream URL adds
		pfx  string
	}{
		{&z.es, "elasticsearch", "ES_URL", ""},
		{&z.solr, "solr", "SOLR_URL", "/solr"},
		{&z.twilio, "twilio", "TWILIO_URL", ""},
		{&z.sendgrid, "sendgrid", "SENDGRID_URL", ""},
		{&z.slack, "slack", "SLACK_URL", "/api"},
		{&z.fcm, "fcm", "FCM_URL", ""},
		{&z.token, "fcm token endpoint", "FCM_TOKEN_URL", "/oauth2/token"},
		{&z.sms, "sms gateway", "SMS_GATEWAY_URL", ""},
	} {
		*f.f = newFake(t, f.name)
		env[f.url] = (*f.f).URL() + f.pfx
	}
	return z
}

func (z *zoo) fakes() []*fake {
	return []*fake{z.es, z.solr, z.twilio, z.sendgrid, z.slack, z.fcm, z.token, z.sms}
}

// headers are the request headers a fake checks: the given ones, and the
// agent's, which must be absent.
func headers(kv ...string) map[string]string {
	h := map[string]string{"User-Agent": "toolgate/dev", "X-Toolgate-Caller": "", "Idempotency-Key": "", "Cookie": ""}
	for i := 0; i < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return h
}

// post is a POST of body to path on f, of the content type, with the
// credential given as Authorization ("" for none) and Accept:
// application/json unless kv says otherwise.
func post(f *fake, path, ctype, authorization, body string, kv ...string) exchange {
	kv = append([]string{"Authorization", authorization, "Content-Type", ctype, "Accept", jsonType}, kv...)
	return exchange{fake: f, want: request{method: "POST", path: path, header: headers(kv...), body: body}}
}

func basicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

const (
	jsonType = "application/json"
	formType = "application/x-www-form-urlencoded"
)

// ---- Elasticsearch / OpenSearch: the search API ----------------------------
// https://www.elastic.co/guide/en/elasticsearch/reference/current/search-search.html
// (request body: query DSL, size; answer: hits.total, hits.hits[]._source),
// https://www.elastic.co/guide/en/elasticsearch/reference/current/http-clients.html
// (Authorization: ApiKey <credentials>), errors: ErrorResponseBase
// {error: ErrorCause{type, reason, root_cause[]}, status} in
// github.com/elastic/elasticsearch-specification, specification/_types/Base.ts.

// esSearch is the _search request for the words q and size hits.
func (z *zoo) esSearch(body string) exchange {
	return post(z.es, "/articles/_search", jsonType, "ApiKey "+z.env["ES_API_KEY"], body)
}

const (
	esHits = `{"took":5,"timed_out":false,"_shards":{"total":1,"successful":1,"skipped":0,"failed":0},` +
		`"hits":{"total":{"value":2,"relation":"eq"},"max_score":1.3862942,"hits":[` +
		`{"_index":"articles","_id":"1","_score":1.3862942,"_source":{"title":"Quantum computing for beginners","url":"https://example.com/a/1"}},` +
		`{"_index":"articles","_id":"7","_score":0.9,"_source":{"title":"Quantum computing, ten years on","url":"https://example.com/a/7"}}]}}`
	esNoHits = `{"took":1,"timed_out":false,"_shards":{"total":1,"successful":1,"skipped":0,"failed":0},` +
		`"hits":{"total":{"value":0,"relation":"eq"},"max_score":null,"hits":[]}}`
	// With rest_total_hits_as_int=true, and from clusters before 7.0,
	// hits.total is a number (HitsMetadata.total: TotalHits | long).
	esTotalAsInt = `{"took":5,"timed_out":false,"_shards":{"total":1,"successful":1,"skipped":0,"failed":0},` +
		`"hits":{"total":2,"max_score":1.3862942,"hits":[` +
		`{"_index":"articles","_id":"1","_score":1.3862942,"_source":{"title":"Quantum computing for beginners","url":"https://example.com/a/1"}}]}}`
	esBadQuery = `{"error":{"root_cause":[{"type":"query_shard_exception","reason":"failed to create query: Can only use fuzzy queries on keyword and text fields - not on [title] which is of type [integer]","index_uuid":"oV8bL1f5QyK2Xk0gBf1f2g","index":"articles"}],` +
		`"type":"search_phase_execution_exception","reason":"all shards failed","phase":"query","grouped":true,"failed_shards":[]},"status":400}`
	esNoIndex = `{"error":{"root_cause":[{"type":"index_not_found_exception","reason":"no such index [articles]","resource.type":"index_or_alias","resource.id":"articles","index_uuid":"_na_","index":"articles"}],` +
		`"type":"index_not_found_exception","reason":"no such index [articles]","resource.type":"index_or_alias","resource.id":"articles","index_uuid":"_na_","index":"articles"},"status":404}`
	esUnauthenticated = `{"error":{"root_cause":[{"type":"security_exception","reason":"unable to authenticate with provided credentials and anonymous access is not allowed for this request"}],` +
		`"type":"security_exception","reason":"unable to authenticate with provided credentials and anonymous access is not allowed for this request"},"status":401}`
	esUnauthorized = `{"error":{"root_cause":[{"type":"security_exception","reason":"action [indices:data/read/search] is unauthorized for API key id [VuaCfGcBCdbkQm-e5aOx] of user [toolgate] on indices [articles]"}],` +
		`"type":"security_exception","reason":"action [indices:data/read/search] is unauthorized for API key id [VuaCfGcBCdbkQm-e5aOx] of user [toolgate] on indices [articles]"},"status":403}`
	esRejected = `{"error":{"root_cause":[{"type":"es_rejected_execution_exception","reason":"rejected execution of TimedRunnable on EsThreadPoolExecutor[name = node-1/search, queue capacity = 1000]"}],` +
		`"type":"es_rejected_execution_exception","reason":"rejected execution of TimedRunnable on EsThreadPoolExecutor[name = node-1/search, queue capacity = 1000]"},"status":429}`
	esAllShardsFailed = `{"error":{"root_cause":[],"type":"search_phase_execution_exception","reason":"all shards failed","phase":"query","grouped":true,"failed_shards":[]},"status":503}`
	esInternal        = `{"error":{"root_cause":[{"type":"null_pointer_exception","reason":null}],"type":"null_pointer_exception","reason":null},"status":500}`
)

// ---- Apache Solr: the select handler ---------------------------------------
// https://solr.apache.org/guide/solr/latest/query-guide/common-query-parameters.html
// (q, fq repeated, rows, wt=json; answer responseHeader + response.docs,
// numFound), https://solr.apache.org/guide/solr/latest/deployment-guide/basic-authentication-plugin.html
// (basic auth; a 401 with WWW-Authenticate), error answers
// {responseHeader, error: {metadata, msg, code}}.

func (z *zoo) solrSelect(query string) exchange {
	return exchange{fake: z.solr, want: request{
		method: "GET",
		path:   "/solr/techproducts/select",
		query:  query,
		header: headers("Authorization", basicAuth(z.env["SOLR_USER"], z.env["SOLR_PASSWORD"]), "Accept", jsonType, "Content-Type", ""),
	}}
}

const (
	solrDocs = `{"responseHeader":{"status":0,"QTime":1,"params":{"q":"name:ipod","fq":["inStock:true","cat:electronics"],"rows":"5","wt":"json"}},` +
		`"response":{"numFound":1,"start":0,"numFoundExact":true,"docs":[{"id":"MA147LL/A","name":"Apple 60 GB iPod with Video Playback Black","price":399.0,"inStock":true}]}}`
	solrNoDocs = `{"responseHeader":{"status":0,"QTime":0,"params":{"q":"name:zune","rows":"10","wt":"json"}},` +
		`"response":{"numFound":0,"start":0,"numFoundExact":true,"docs":[]}}`
	solrSyntaxError = `{"responseHeader":{"status":400,"QTime":0,"params":{"q":"name:(ipod","rows":"10","wt":"json"}},` +
		`"error":{"metadata":["error-class","org.apache.solr.common.SolrException","root-error-class","org.apache.solr.search.SyntaxError"],` +
		`"msg":"org.apache.solr.search.SyntaxError: Cannot parse 'name:(ipod': Encountered \"<EOF>\" at line 1, column 10.","code":400}}`
	solr401 = "<html>\n<head>\n<meta http-equiv=\"Content-Type\" content=\"text/html;charset=utf-8\"/>\n<title>Error 401 require authentication</title>\n</head>\n" +
		"<body><h2>HTTP ERROR 401 require authentication</h2>\n<table>\n<tr><th>URI:</th><td>/solr/techproducts/select</td></tr>\n<tr><th>STATUS:</th><td>401</td></tr>\n</table>\n</body>\n</html>\n"
	solr404 = "<html>\n<head>\n<meta http-equiv=\"Content-Type\" content=\"text/html;charset=utf-8\"/>\n<title>Error 404 Not Found</title>\n</head>\n" +
		"<body><h2>HTTP ERROR 404 Not Found</h2>\n<table>\n<tr><th>URI:</th><td>/solr/techproducts/select</td></tr>\n<tr><th>STATUS:</th><td>404</td></tr>\n</table>\n</body>\n</html>\n"
	solrNoServers = `{"responseHeader":{"status":503,"QTime":2},"error":{"metadata":["error-class","org.apache.solr.common.SolrException","root-error-class","org.apache.solr.common.SolrException"],` +
		`"msg":"no servers hosting shard: shard1","code":503}}`
)

// ---- Twilio: create a Message ----------------------------------------------
// https://www.twilio.com/docs/messaging/api/message-resource#create-a-message-resource
// (POST /2010-04-01/Accounts/{AccountSid}/Messages.json, form body To, From,
// Body; HTTP basic auth AccountSid:AuthToken; 201 with the Message), the
// same in github.com/twilio/twilio-oai spec/json/twilio_api_v2010.json;
// errors: https://www.twilio.com/docs/usage/twilios-response
// ({code, message, more_info, status}) and
// https://www.twilio.com/docs/api/errors/20429 (429: never processed).

func (z *zoo) twilioCreate(body string) exchange {
	sid := z.env["TWILIO_ACCOUNT_SID"]
	return post(z.twilio, "/2010-04-01/Accounts/"+sid+"/Messages.json", formType, basicAuth(sid, z.env["TWILIO_AUTH_TOKEN"]), body)
}

const (
	twilioQueued = `{"account_sid":"AC0123456789abcdef0123456789abcdef","api_version":"2010-04-01","body":"Your order has shipped",` +
		`"date_created":"Thu, 24 Aug 2023 05:01:45 +0000","date_sent":null,"date_updated":"Thu, 24 Aug 2023 05:01:45 +0000",` +
		`"direction":"outbound-api","error_code":null,"error_message":null,"from":"+15017122661","messaging_service_sid":null,` +
		`"num_media":"0","num_segments":"1","price":null,"price_unit":null,"sid":"SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","status":"queued",` +
		`"subresource_uris":{"media":"/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Messages/SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/Media.json"},` +
		`"to":"+15558675310","uri":"/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Messages/SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.json"}`
	twilioInvalidTo    = `{"code":21211,"message":"The 'To' number +15558675310 is not a valid phone number.","more_info":"https://www.twilio.com/docs/errors/21211","status":400}`
	twilioUnsubscribed = `{"code":21610,"message":"Attempt to send to unsubscribed recipient","more_info":"https://www.twilio.com/docs/errors/21610","status":400}`
	twilioAuthError    = `{"code":20003,"detail":"Your AccountSid or AuthToken was incorrect.","message":"Authentication Error - invalid username","more_info":"https://www.twilio.com/docs/errors/20003","status":401}`
	twilioNotFound     = `{"code":20404,"message":"The requested resource /2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Messages.json was not found","more_info":"https://www.twilio.com/docs/errors/20404","status":404}`
	twilioTooMany      = `{"code":20429,"message":"Too Many Requests","more_info":"https://www.twilio.com/docs/errors/20429","status":429}`
	twilioInternal     = `{"code":20500,"message":"Internal Server Error","more_info":"https://www.twilio.com/docs/errors/20500","status":500}`
	twilioUnavailable  = `{"code":20503,"message":"Service Unavailable","more_info":"https://www.twilio.com/docs/errors/20503","status":503}`
)

// ---- SendGrid v3: Mail Send ------------------------------------------------
// https://www.twilio.com/docs/sendgrid/api-reference/mail-send/mail-send
// (POST /v3/mail/send, Authorization: Bearer <API key>, JSON body
// personalizations[].to[].email, from.email, subject, content[].type/value;
// 202 with an empty body), the same in github.com/sendgrid/sendgrid-oai;
// errors: https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/errors
// ({"errors": [{"field", "message", "help"}]}).

func (z *zoo) sendgridSend(body string) exchange {
	return post(z.sendgrid, "/v3/mail/send", jsonType, "Bearer "+z.env["SENDGRID_API_KEY"], body)
}

const (
	sendgridBadFrom      = `{"errors":[{"message":"The from email does not contain a valid address.","field":"from.email","help":"http://sendgrid.com/docs/API_Reference/Web_API_v3/Mail/errors.html#message.from"}]}`
	sendgridUnauthorized = `{"errors":[{"field":null,"message":"The provided authorization grant is invalid, expired, or revoked"}]}`
	sendgridForbidden    = `{"errors":[{"field":"from","message":"The from address does not match a verified Sender Identity. Mail cannot be sent until this error is resolved. Visit https://sendgrid.com/docs/for-developers/sending-email/sender-identity/ to see the Sender Identity requirements"}]}`
	sendgridTooLarge     = `{"errors":[{"field":null,"message":"The JSON payload you have included in your request is too large."}]}`
	sendgridTooMany      = `{"errors":[{"field":null,"message":"too many requests"}]}`
	sendgridInternal     = `{"errors":[{"field":null,"message":"An internal server error occurred."}]}`
)

// ---- Slack: chat.postMessage -----------------------------------------------
// https://api.slack.com/methods/chat.postMessage (POST, a bot token as
// Authorization: Bearer, JSON body with Content-type: application/json;
// charset=utf-8; HTTP 200 with {"ok": true, …} or {"ok": false, "error"}),
// the error list in github.com/slackapi/slack-api-specs
// web-api/slack_web_openapi_v2.json; https://api.slack.com/apis/rate-limits
// (HTTP 429 with Retry-After: seconds).

func (z *zoo) slackPost(body string) exchange {
	return post(z.slack, "/api/chat.postMessage", "application/json; charset=utf-8", "Bearer "+z.env["SLACK_BOT_TOKEN"], body)
}

const (
	slackPosted = `{"ok":true,"channel":"C024BE91L","ts":"1503435956.000247","message":{"bot_id":"B19LU7CSY","subtype":"bot_message",` +
		`"text":"Deploy finished","ts":"1503435956.000247","type":"message","username":"toolgate"}}`
)

func slackError(code string) string { return `{"ok":false,"error":"` + code + `"}` }

// ---- Firebase Cloud Messaging HTTP v1 --------------------------------------
// https://firebase.google.com/docs/reference/fcm/rest/v1/projects.messages/send
// (POST /v1/projects/{project}/messages:send, {"message": {"token",
// "notification": {"title", "body"}}}, Authorization: Bearer <OAuth2
// access token>; 200 with the message's name),
// https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode and
// https://firebase.google.com/docs/cloud-messaging/error-codes (errors as
// {error: {code, message, status, details: [{"@type": …FcmError,
// errorCode}]}}; 404 UNREGISTERED). The token endpoint is RFC 6749 §4.4
// (https://www.rfc-editor.org/rfc/rfc6749#section-4.4): a form POST of
// grant_type=client_credentials and scope, the client authenticated with
// HTTP basic auth, answered {access_token, token_type, expires_in}.

const fcmAccessToken = "ya29.zoo-access-token"

func (z *zoo) fcmToken() exchange {
	x := post(z.token, "/oauth2/token", formType, basicAuth(url.QueryEscape(z.env["FCM_CLIENT_ID"]), url.QueryEscape(z.env["FCM_CLIENT_SECRET"])),
		"grant_type=client_credentials&scope=https%3A%2F%2Fwww.googleapis.com%2Fauth%2Ffirebase.messaging")
	// Go's HTTP client's own headers, through golang.org/x/oauth2.
	delete(x.want.header, "User-Agent")
	delete(x.want.header, "Accept")
	x.want.anyValue = []string{"User-Agent"}
	x.give = answer{
		status: 200,
		header: map[string]string{"Content-Type": jsonType, "Cache-Control": "no-store"},
		body:   `{"access_token":"` + fcmAccessToken + `","expires_in":3599,"token_type":"Bearer"}`,
	}
	return x
}

func (z *zoo) fcmSend(body string) exchange {
	return post(z.fcm, "/v1/projects/"+z.env["FCM_PROJECT"]+"/messages:send", jsonType, "Bearer "+fcmAccessToken, body)
}

// fcmError is the error answer of FCM for an HTTP status, its canonical
// status name, a message and the FcmError code in details.
func fcmError(code int, status, message, errorCode string) string {
	return `{"error":{"code":` + strconv.Itoa(code) + `,"message":"` + message + `","status":"` + status + `",` +
		`"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"` + errorCode + `"}]}}`
}

// ---- A plain-text SMS gateway ----------------------------------------------
// Many in-house and older SMS gateways take a form and answer one line of
// text/plain with HTTP 200 whatever happened, the status in the first word
// (as issue 16 describes it): "OK: queued" or "ERR: <reason>"; a missing or
// wrong key is 401, overload 503, both with a text line too. The key is a
// query parameter, apikey.

func (z *zoo) smsSend(body string) exchange {
	x := post(z.sms, "/sms/send", formType, "", body, "Accept", "text/plain")
	x.want.query = "apikey=" + z.env["SMS_GATEWAY_KEY"]
	return x
}
