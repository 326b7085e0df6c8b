package policy

import (
	"net/http"
	"strings"
	"testing"
)

func testAccess(defaultAllow bool) *Access {
	return &Access{
		DefaultAllow: defaultAllow,
		Identities: map[string]string{
			"spiffe://cluster.local/ns/agents/sa/research": "research-agent",
			"spiffe://cluster.local/ns/agents/sa/ops":      "ops-agent",
		},
		Callers: map[string]*Caller{
			"research-agent": {Name: "research-agent", Tools: []string{"search_articles"}},
			"ops-agent":      {Name: "ops-agent", Tools: []string{"*"}},
			"mute-agent":     {Name: "mute-agent"},
		},
	}
}

func TestAccessAllows(t *testing.T) {
	for _, tc := range []struct {
		name         string
		defaultAllow bool
		caller, tool string
		want         bool
	}{
		{"a listed caller may call a listed tool", false, "research-agent", "search_articles", true},
		{"a listed caller may not call an unlisted tool", false, "research-agent", "send_notification", false},
		{"default allow does not widen a listed caller's tools", true, "research-agent", "send_notification", false},
		{"a wildcard caller may call any tool", false, "ops-agent", "send_notification", true},
		{"a wildcard caller may call a tool the policy does not know", false, "ops-agent", "no_such_tool", true},
		{"a caller with no tools may call nothing", true, "mute-agent", "search_articles", false},
		{"an unlisted caller gets default deny", false, "stranger", "search_articles", false},
		{"an unlisted caller gets default allow", true, "stranger", "search_articles", true},
		{"an anonymous caller gets default deny", false, "", "search_articles", false},
		{"an anonymous caller gets default allow", true, "", "search_articles", true},
		{"tool names match exactly", false, "research-agent", "Search_Articles", false},
		{"a tool named like a wildcard is not a wildcard", false, "research-agent", "*", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := testAccess(tc.defaultAllow)
			if got := a.Allows(tc.caller, tc.tool); got != tc.want {
				t.Fatalf("Allows(%q, %q) = %v, want %v", tc.caller, tc.tool, got, tc.want)
			}
		})
	}
}

func TestAccessCallerLabel(t *testing.T) {
	a := testAccess(true)
	for caller, want := range map[string]string{
		"research-agent": "research-agent",
		"mute-agent":     "mute-agent",
		"stranger":       "unknown",
		"":               "unknown",
	} {
		if got := a.CallerLabel(caller); got != want {
			t.Errorf("CallerLabel(%q) = %q, want %q", caller, got, want)
		}
	}
}

func TestAccessIdentify(t *testing.T) {
	headerMode := Server{CallerHeader: "X-Toolgate-Caller", CallerFrom: CallerFromHeader}
	xfccMode := Server{CallerHeader: "X-Toolgate-Caller", CallerFrom: CallerFromXFCC}
	const research = "By=spiffe://cluster.local/ns/tools/sa/toolgate;Hash=abc;URI=spiffe://cluster.local/ns/agents/sa/research"
	for _, tc := range []struct {
		name   string
		server Server
		header http.Header
		want   string
	}{
		{"the caller header names the caller", headerMode,
			http.Header{"X-Toolgate-Caller": {"research-agent"}}, "research-agent"},
		{"an unlisted name in the caller header is returned as is", headerMode,
			http.Header{"X-Toolgate-Caller": {"stranger"}}, "stranger"},
		{"no caller header is anonymous", headerMode, http.Header{}, ""},
		{"several caller headers are a spoofing attempt and name nobody", headerMode,
			http.Header{"X-Toolgate-Caller": {"research-agent", "ops-agent"}}, ""},
		{"an oversized caller header is anonymous", headerMode,
			http.Header{"X-Toolgate-Caller": {strings.Repeat("a", 129)}}, ""},
		{"a caller header of 128 bytes is kept", headerMode,
			http.Header{"X-Toolgate-Caller": {strings.Repeat("a", 128)}}, strings.Repeat("a", 128)},
		{"header mode ignores XFCC", headerMode,
			http.Header{"X-Forwarded-Client-Cert": {research}}, ""},
		{"xfcc mode maps the SPIFFE ID to a caller", xfccMode,
			http.Header{"X-Forwarded-Client-Cert": {research}}, "research-agent"},
		{"xfcc mode ignores the caller header", xfccMode,
			http.Header{"X-Toolgate-Caller": {"ops-agent"}}, ""},
		{"xfcc mode ignores a caller header that disagrees with the certificate", xfccMode,
			http.Header{"X-Toolgate-Caller": {"ops-agent"}, "X-Forwarded-Client-Cert": {research}}, "research-agent"},
		{"xfcc mode treats an unmapped SPIFFE ID as anonymous", xfccMode,
			http.Header{"X-Forwarded-Client-Cert": {"URI=spiffe://cluster.local/ns/agents/sa/intruder"}}, ""},
		{"xfcc mode does not take a caller name for a SPIFFE ID", xfccMode,
			http.Header{"X-Forwarded-Client-Cert": {"URI=research-agent"}}, ""},
		{"xfcc mode treats a malformed header as anonymous", xfccMode,
			http.Header{"X-Forwarded-Client-Cert": {`URI="spiffe://cluster.local/ns/agents/sa/research`}}, ""},
		{"xfcc mode uses the last certificate", xfccMode,
			http.Header{"X-Forwarded-Client-Cert": {"URI=spiffe://cluster.local/ns/agents/sa/ops," + research}}, "research-agent"},
		{"two xfcc lines are one list and the last line's element wins", xfccMode,
			http.Header{"X-Forwarded-Client-Cert": {"URI=spiffe://cluster.local/ns/agents/sa/ops", research}}, "research-agent"},
		{"the first of two xfcc lines does not name the caller", xfccMode,
			http.Header{"X-Forwarded-Client-Cert": {research, "URI=spiffe://cluster.local/ns/agents/sa/intruder"}}, ""},
		{"the last element of the last of several xfcc lines wins", xfccMode,
			http.Header{"X-Forwarded-Client-Cert": {research, `Subject="CN=x,OU=y;z";URI=spiffe://a,URI=spiffe://b`, "By=spiffe://c;URI=spiffe://cluster.local/ns/agents/sa/ops;Subject=\"a,b\"," + research}}, "research-agent"},
		{"a malformed earlier xfcc line names nobody", xfccMode,
			http.Header{"X-Forwarded-Client-Cert": {`Subject="CN=x`, `y";` + research}}, ""},
		{"an empty last xfcc line names nobody", xfccMode,
			http.Header{"X-Forwarded-Client-Cert": {research, ""}}, ""},
		{"xfcc lines over 16KiB together name nobody", xfccMode,
			http.Header{"X-Forwarded-Client-Cert": {"URI=spiffe://a/" + strings.Repeat("x", 9<<10), research + ";Subject=" + strings.Repeat("y", 8<<10)}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := testAccess(false).Identify(tc.server, tc.header); got != tc.want {
				t.Fatalf("Identify = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestXFCCURI(t *testing.T) {
	for _, tc := range []struct {
		name, value, want string
	}{
		{"a single element", "By=spiffe://b;Hash=468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688;URI=spiffe://a", "spiffe://a"},
		{"URI first", "URI=spiffe://a;By=spiffe://b", "spiffe://a"},
		{"the last of several certificates wins", "By=x;URI=spiffe://first,By=y;URI=spiffe://second,By=z;URI=spiffe://third", "spiffe://third"},
		{"a last certificate without a URI gives nothing", "URI=spiffe://first,By=y;Hash=h", ""},
		{"the key is case-insensitive", "uri=spiffe://a", "spiffe://a"},
		{"spaces around keys and values are ignored", " By=b ; URI = spiffe://a ", "spiffe://a"},
		{"spaces after the comma between certificates are ignored", "URI=spiffe://first, URI=spiffe://second", "spiffe://second"},
		{"a quoted URI", `URI="spiffe://a"`, "spiffe://a"},
		{"a quoted subject may hold commas and semicolons",
			`By=spiffe://b;Subject="CN=agent,OU=ops;O=acme";URI=spiffe://a`, "spiffe://a"},
		{"a quoted subject in an earlier certificate does not split the last",
			`Subject="/C=US/ST=CA/L=San Francisco/OU=Lyft/CN=Test Client";URI=spiffe://first,Subject="a,b;c";URI=spiffe://second`, "spiffe://second"},
		{"escaped quotes inside a quoted value", `Subject="say \"hi\", \"bye\"";URI="spiffe://a/\"q\""`, `spiffe://a/"q"`},
		{"an escaped backslash inside a quoted value", `URI="spiffe://a\\b"`, `spiffe://a\b`},
		{"an escaped ordinary character is itself", `URI="spiffe://\a"`, "spiffe://a"},
		{"a quoted empty URI is empty", `URI=""`, ""},
		{"a URI with an equals sign in its value", "URI=spiffe://a/b=c", "spiffe://a/b=c"},

		{"an empty value", "", ""},
		{"only a comma", ",", ""},
		{"a trailing comma leaves an empty last element", "URI=spiffe://a,", ""},
		{"a trailing semicolon leaves a pair without equals", "URI=spiffe://a;", ""},
		{"a pair without equals", "URI=spiffe://a;junk", ""},
		{"an unbalanced quote", `URI="spiffe://a`, ""},
		{"an unbalanced quote in an earlier certificate", `Subject="a;URI=spiffe://first,URI=spiffe://second`, ""},
		{"a quote inside an unquoted value", `URI=spiffe://a"b"`, ""},
		{"text after the closing quote", `URI="spiffe://a"x`, ""},
		{"a lone quote", `URI="`, ""},
		{"a backslash escaping the closing quote", `URI="spiffe://a\"`, ""},
		{"a backslash at the very end of a quoted value", `URI="spiffe://a\`, ""},
		{"a bare string", "spiffe://a", ""},
		{"a value over 16KiB", "URI=spiffe://a/" + strings.Repeat("x", 16<<10), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := XFCCURI(tc.value); got != tc.want {
				t.Fatalf("XFCCURI(%q) = %q, want %q", tc.value, got, tc.want)
			}
		})
	}
}

// quoteXFCC quotes s the way Envoy does: double quotes, with backslashes
// before double quotes and backslashes.
func quoteXFCC(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func FuzzXFCCURI(f *testing.F) {
	for _, seed := range []string{
		"",
		"URI=spiffe://a",
		"By=spiffe://b;Hash=h;URI=spiffe://a",
		"URI=spiffe://first,By=y;URI=spiffe://second",
		`Subject="CN=a,OU=b;c";URI="spiffe://a/\"q\""`,
		`URI="spiffe://a\`,
		`URI="`,
		`,;="\`,
		"uri = spiffe://a ;",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := XFCCURI(v) // must not panic
		if len(got) > len(v) {
			t.Fatalf("XFCCURI(%q) = %q, longer than its input", v, got)
		}
		if len(v) > 4<<10 { // quoting may double it; stay under the 16KiB bound
			return
		}
		// Certificates before the last never matter, in the same line or
		// in an earlier one.
		if prefixed := XFCCURI("By=spiffe://b;URI=spiffe://earlier," + v); prefixed != got {
			t.Fatalf("with an earlier certificate XFCCURI = %q, alone %q (input %q)", prefixed, got, v)
		}
		if lines := XFCCLinesURI([]string{"By=spiffe://b;URI=spiffe://earlier", v}); lines != got {
			t.Fatalf("after an earlier line XFCCLinesURI = %q, alone %q (input %q)", lines, got, v)
		}
		// Any string survives Envoy's quoting.
		if back := XFCCURI(`By=spiffe://b;URI=` + quoteXFCC(v) + `;Subject="x,y;z"`); back != v {
			t.Fatalf("quoted %q came back as %q", v, back)
		}
	})
}

func TestAccessWidensImplicitly(t *testing.T) {
	none := &Access{DefaultAllow: true}
	explicitAllow := &Access{DefaultAllow: true, DefaultSet: true}
	deny := &Access{DefaultAllow: false, DefaultSet: true}
	listed := testAccess(true) // callers, default allow implied
	listedDeny := testAccess(false)
	listedDeny.DefaultSet = true
	callersOnly := &Access{DefaultAllow: true, Callers: map[string]*Caller{"ops-agent": {Name: "ops-agent", Tools: []string{"*"}}}}
	for _, tc := range []struct {
		name      string
		prev, cur *Access
		widens    bool
	}{
		{"no access section replacing default deny", deny, none, true},
		{"no access section replacing listed callers", listed, none, true},
		{"callers without a default replacing default deny", listedDeny, callersOnly, true},
		{"an explicit default allow replacing default deny", deny, explicitAllow, false},
		{"an explicit default allow replacing listed callers", listed, explicitAllow, false},
		{"callers without a default replacing callers without a default", listed, callersOnly, false},
		{"no access section replacing none", none, none, false},
		{"no access section replacing an explicit allow", explicitAllow, none, false},
		{"default deny replacing anything", none, deny, false},
		{"listed callers with default deny replacing default deny", deny, listedDeny, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := tc.cur.WidensImplicitly(tc.prev)
			if (why != "") != tc.widens {
				t.Fatalf("WidensImplicitly = %q, want widens %v", why, tc.widens)
			}
		})
	}
}
