// Package console is the operator's console the admin port serves at
// /ui/: every tool of the running policy with its contract, the live
// state of the pipeline (breakers, bulkheads, rates and budgets, keys in
// flight, each tool's last outcomes, the last reload), a playground that
// shows the exact request toolgate sends and the exact text the model
// reads, and learning mode's summary and draft.
//
// It is a client of the pipeline's exported API only (proxy.View: Try,
// Call, ToolState, Upstreams, Callers, SecretHider): it keeps no state of
// its own but a key for its forms' tokens. The pages are rendered on the
// server from templates embedded in the binary, with a little plain
// JavaScript (console.js) that refreshes the live state and previews the
// arguments; every view works without it. The templates run on
// internal/htmltemplate, html/template's escaping without method calls:
// they read fields and call funcs, never a method of their data, so the
// sidecar keeps the linker's pruning of unused methods.
//
// What the console guarantees:
//
//   - It is served on the admin port only, behind the admin port's guard
//     (proxy.AdminHandler): a foreign Host and cross-site browser requests
//     are refused before a page is reached. Its forms post to the same
//     origin and carry a token only a page of the console holds; see
//     tokenFor.
//   - No secret is rendered: the dry run shows credentials masked and
//     ${VAR} values as *** (proxy.View.Try), a pasted answer is cleared of
//     the secrets the running tool holds, and everything shown from the
//     policy goes through proxy.View.SecretHider.
//   - A live call runs only for a read-only tool, and only when the
//     policy says server.console.live_calls: true; the server refuses
//     anything else, whatever the page sent.
package console

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	template "github.com/toolgate/toolgate/internal/htmltemplate"
	"io/fs"
	"log/slog"
	"net/http"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/learn"
	"github.com/toolgate/toolgate/proxy"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Options are the console's sources.
type Options struct {
	// Core is the pipeline whose state the console shows. Required.
	Core *proxy.Core
	// Reloader tells the policy's generation and how the last reload
	// ended; nil shows neither.
	Reloader *config.Reloader
	// Learner is learning mode; nil when it is off.
	Learner *learn.Learner
	// Logger receives the dry runs' warnings (a response expression that
	// fails); nil discards them.
	Logger *slog.Logger
}

// Handler serves the console under /ui/.
type Handler struct {
	core     *proxy.Core
	reloader *config.Reloader
	learner  *learn.Learner
	logger   *slog.Logger
	pages    *template.Template
	mux      *http.ServeMux
	// formKey signs the forms' tokens; it is made anew at every start.
	formKey [32]byte
}

// New returns the console's handler, for proxy.AdminOptions.Console.
func New(opts Options) *Handler {
	h := &Handler{core: opts.Core, reloader: opts.Reloader, learner: opts.Learner, logger: opts.Logger}
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	_, _ = rand.Read(h.formKey[:])
	h.pages = template.Must(template.New("console").Funcs(funcs()).ParseFS(templateFiles, "templates/*.html"))
	static, _ := fs.Sub(staticFiles, "static")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/{$}", h.overview)
	mux.HandleFunc("GET /ui/tools/{tool}", h.toolPage)
	mux.HandleFunc("POST /ui/tools/{tool}/try", h.try)
	mux.HandleFunc("POST /ui/tools/{tool}/call", h.call)
	mux.HandleFunc("GET /ui/learn", h.learnPage)
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	h.mux = mux
	return h
}

// ServeHTTP serves a console request, unless the policy turned the
// console off (server.console.enabled: false).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.core.Snapshot().Server.Console.Disabled {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	// The pages load nothing from elsewhere, run only console.js, and are
	// never framed (a framed form is a click away from a live call).
	hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	// With no-referrer a browser sends "Origin: null" on a form's POST,
	// which the admin guard refuses; same-origin keeps the Origin.
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

// tokenFor is the token of the console's forms. The admin guard already
// refuses a request a page of another site made (its Sec-Fetch-Site, or
// its Origin), which every browser in use sends with a form's POST; the
// token holds for a browser that sends neither: a page of another site
// cannot read the console's pages (the same-origin policy, and the guard's
// Host check against DNS rebinding), so it cannot know the token. The key
// is made at start and never leaves the process.
func (h *Handler) tokenFor(tool string) string {
	m := hmac.New(sha256.New, h.formKey[:])
	m.Write([]byte("toolgate console form\x00" + tool))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// validToken reports whether a form's token is the console's for tool.
func (h *Handler) validToken(tool, token string) bool {
	return hmac.Equal([]byte(token), []byte(h.tokenFor(tool)))
}

// render writes a page, or a plain error when the template fails (a
// template that calls a method of its data fails: internal/htmltemplate),
// never half a page.
func (h *Handler) render(w http.ResponseWriter, code int, page string, data any) {
	var out bytes.Buffer
	if err := h.pages.ExecuteTemplate(&out, page, data); err != nil {
		h.logger.Warn("console page failed", "page", page, "err", err.Error())
		http.Error(w, "console page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = out.WriteTo(w)
}
